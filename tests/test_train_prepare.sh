#!/bin/sh
# test_train_prepare.sh — `kogpt2-train prepare` never ends "successfully" with nothing, and
# never duplicates data by accident (issue 13):
# 1) binary garbage, and a corpus in another encoding (EUC-KR: no line is UTF-8), exit 1
#    with what was dropped and why, and leave no directory behind;
# 2) a corpus with some such lines keeps the rest and counts the dropped ones in its summary;
# 3) a second prepare into a directory with shards exits 1 and changes nothing; --append
#    adds shards, --force replaces them (a --force that finds no documents keeps the old
#    ones), and the two together are a usage error.
# 4) memory is bounded by --max-line-bytes (1 MiB), not by the input (issue 24): a .gz of one
#    200 MB line (in 0.2 MB) is read past in a few MB and counted as over-long beside the
#    corpus; a device (/dev/zero) is refused at once; a pipe is read (the corpus through
#    /dev/stdin), and an endless NUL line through one stays small; --max-line-bytes N drops
#    exactly the lines over N bytes.
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
w=$(mktemp -d /tmp/test_train_prepare.XXXXXX)
trap 'rm -rf "$w"' EXIT
prep() { "$B/kogpt2-train" prepare --tokenizer "$fx/tok.model" --val-every-doc 5 "$@"; }
# expect RC WANT COMMAND...: COMMAND exits RC and its output holds WANT
expect() {
  want_rc=$1 want=$2; shift 2
  rc=0; "$@" > "$w/out" 2>&1 || rc=$?
  [ $rc = "$want_rc" ] && grep -qF -- "$want" "$w/out" ||
    { echo "FAIL: $* exited $rc (want $want_rc, '$want')"; cat "$w/out"; exit 1; }
  echo "exit $rc: $(cat "$w/out")"
}
sums() { cksum "$1"/* | sort; }

# 1) nothing but dropped lines: invalid UTF-8 (0xFF, overlong C0 C1, a surrogate ED A0 80)
#    and NUL bytes; then "나는 학교에 갔다." in EUC-KR
printf '\377\376\000\001garbage\n\300\301\200\n\000\000\000\n\355\240\200\n' > "$w/garbage.bin"
expect 1 'no documents: 4 lines dropped (2 not UTF-8, 2 with NUL bytes, 0 over 1048576 bytes), the first at '"$w/garbage.bin"':1' \
  prep --input "$w/garbage.bin" --out "$w/g"
[ ! -e "$w/g" ] || { echo "FAIL: a failed prepare left $w/g"; exit 1; }
i=0
while [ $i -lt 20 ]; do printf '\263\252\264\302 \307\320\261\263\277\241 \260\254\264\331.\n'; i=$((i + 1)); done > "$w/euckr.txt"
expect 1 'no documents: 20 lines dropped (20 not UTF-8, 0 with NUL bytes, 0 over' \
  prep --input "$w/euckr.txt" --out "$w/g"
[ ! -e "$w/g" ]

# 2) some lines dropped: the rest is prepared, the summary counts them (line 21 is the first)
{ head -n 20 "$fx/corpus.txt"; cat "$w/garbage.bin"; sed -n 21,40p "$fx/corpus.txt"; } > "$w/mixed.txt"
expect 0 'prepared 1 files, 40 documents' prep --input "$w/mixed.txt" --out "$w/d"
grep -qF '; 4 lines dropped (2 not UTF-8, 2 with NUL bytes, 0 over 1048576 bytes), the first at '"$w/mixed.txt"':21' "$w/out" ||
  { echo "FAIL: the summary does not count the dropped lines"; exit 1; }
ls "$w/d" > "$w/ls1"

# 3) a second prepare: refused; --append adds; --force replaces
before=$(sums "$w/d")
expect 1 'holds shards already (train_000000.bin ...): --append adds to them, --force replaces them' \
  prep --input "$w/mixed.txt" --out "$w/d"
[ "$(sums "$w/d")" = "$before" ] || { echo "FAIL: a refused prepare changed $w/d"; exit 1; }
expect 0 '-> '"$w/d"' (added)' prep --input "$w/mixed.txt" --out "$w/d" --append
[ -f "$w/d/train_000001.bin" ] && [ -f "$w/d/val_000001.bin" ] && [ -f "$w/d/train_000000.bin" ] ||
  { echo "FAIL: --append did not add shards"; ls "$w/d"; exit 1; }
before=$(sums "$w/d")
expect 1 'no documents' prep --input "$w/garbage.bin" --out "$w/d" --force
[ "$(sums "$w/d")" = "$before" ] || { echo "FAIL: a --force that failed changed $w/d"; exit 1; }
expect 0 '-> '"$w/d"' (replaced)' prep --input "$w/mixed.txt" --out "$w/d" --force
prep --input "$w/mixed.txt" --out "$w/fresh" > /dev/null
ls "$w/d" | diff "$w/ls1" - && cmp "$w/d/train_000000.bin" "$w/fresh/train_000000.bin" &&
  cmp "$w/d/val_000000.txt" "$w/fresh/val_000000.txt" ||
  { echo "FAIL: --force did not replace the shards with what a fresh prepare writes"; exit 1; }
expect 2 '--append and --force exclude each other' prep --input "$w/mixed.txt" --out "$w/d" \
  --append --force

# 4) peak RSS of a command, in MB, into $w/rss (the command's output into $w/out)
rss() {
  /usr/bin/python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:], stdout=open(sys.argv[1], "w"), stderr=subprocess.STDOUT)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
sys.exit(rc)' "$w/out" "$@" > "$w/rss"
}
# the binary's own start-up is the baseline: what a tiny corpus peaks at; the bound is on
# what the input adds to it
rss "$B/kogpt2-train" prepare --tokenizer "$fx/tok.model" --input "$w/mixed.txt" --out "$w/base"
base=$(cat "$w/rss")
grow() { echo $(($(cat "$w/rss") - base)); }
head -c 200000000 /dev/zero | gzip -1 > "$w/huge.txt.gz"
rss "$B/kogpt2-train" prepare --tokenizer "$fx/tok.model" --input "$w/huge.txt.gz" \
  --input "$w/mixed.txt" --out "$w/h"
grep -qF 'prepared 2 files, 40 documents (200.' "$w/out" &&
  grep -qF '5 lines dropped (2 not UTF-8, 2 with NUL bytes, 1 over 1048576 bytes), the first at '"$w/huge.txt.gz"':1' "$w/out" &&
  [ "$(grow)" -lt 100 ] ||
  { echo "FAIL: a 200 MB line: $(grow) MB over the $base MB baseline"; cat "$w/out"; exit 1; }
echo "a 200 MB line in a .gz: $(grow) MB over the $base MB baseline; $(cat "$w/out")"
expect 1 '/dev/zero: not a file, a directory or a pipe' prep --input /dev/zero --out "$w/z"
[ ! -e "$w/z" ]
# shellcheck disable=SC2002 # a pipe, not a file
cat "$fx/corpus.txt" | prep --input /dev/stdin --out "$w/p" > "$w/out"
grep -qF 'prepared 1 files, 4000 documents' "$w/out" || { echo "FAIL: a pipe"; cat "$w/out"; exit 1; }
head -c 100000000 /dev/zero | rss "$B/kogpt2-train" prepare --tokenizer "$fx/tok.model" \
  --input /dev/stdin --out "$w/z" || true
grep -qF 'no documents: 1 line dropped (0 not UTF-8, 0 with NUL bytes, 1 over 1048576 bytes)' "$w/out" &&
  [ "$(grow)" -lt 100 ] && [ ! -e "$w/z" ] ||
  { echo "FAIL: 100 MB of NUL through a pipe: $(grow) MB over the baseline"; cat "$w/out"; exit 1; }
echo "100 MB of NUL through a pipe: $(grow) MB over the $base MB baseline; $(cat "$w/out")"
# the limit is exact: lines of 24 and 25 bytes kept, of 26 dropped ("나는 학교에 갔다." + 0-2 x)
printf '나는 학교에 갔다.\n나는 학교에 갔다.x\n나는 학교에 갔다.xx\n나는 학교에 갔다.\n' > "$w/limit.txt"
expect 0 '3 documents' prep --input "$w/limit.txt" --out "$w/l" --max-line-bytes 25
grep -qF '1 line dropped (0 not UTF-8, 0 with NUL bytes, 1 over 25 bytes), the first at '"$w/limit.txt"':3' "$w/out" ||
  { echo "FAIL: --max-line-bytes 25"; exit 1; }
expect 2 '--max-line-bytes must be an integer in 1..1073741824' prep --input "$w/limit.txt" --out "$w/l2" --max-line-bytes 0
echo PASS
