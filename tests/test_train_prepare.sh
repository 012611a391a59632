#!/bin/sh
# test_train_prepare.sh — `kogpt2-train prepare` never ends "successfully" with nothing, and
# never duplicates data by accident (issue 13):
# 1) binary garbage, and a corpus in another encoding (EUC-KR: no line is UTF-8), exit 1
#    with what was dropped and why, and leave no directory behind;
# 2) a corpus with some such lines keeps the rest and counts the dropped ones in its summary;
# 3) a second prepare into a directory with shards exits 1 and changes nothing; --append
#    adds shards, --force replaces them (a --force that finds no documents keeps the old
#    ones), and the two together are a usage error.
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
expect 1 'no documents: 4 lines dropped (2 not UTF-8, 2 with NUL bytes), the first at '"$w/garbage.bin"':1' \
  prep --input "$w/garbage.bin" --out "$w/g"
[ ! -e "$w/g" ] || { echo "FAIL: a failed prepare left $w/g"; exit 1; }
i=0
while [ $i -lt 20 ]; do printf '\263\252\264\302 \307\320\261\263\277\241 \260\254\264\331.\n'; i=$((i + 1)); done > "$w/euckr.txt"
expect 1 'no documents: 20 lines dropped (20 not UTF-8, 0 with NUL bytes)' \
  prep --input "$w/euckr.txt" --out "$w/g"
[ ! -e "$w/g" ]

# 2) some lines dropped: the rest is prepared, the summary counts them (line 21 is the first)
{ head -n 20 "$fx/corpus.txt"; cat "$w/garbage.bin"; sed -n 21,40p "$fx/corpus.txt"; } > "$w/mixed.txt"
expect 0 'prepared 1 files, 40 documents' prep --input "$w/mixed.txt" --out "$w/d"
grep -qF '; 4 lines dropped (2 not UTF-8, 2 with NUL bytes), the first at '"$w/mixed.txt"':21' "$w/out" ||
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
echo PASS
