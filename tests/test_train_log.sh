#!/bin/sh
# test_train_log.sh — the trainer as a Hugging Face Trainer or llm.c user expects it (issue 29,
# items 11 and 13-17): --version; a validation before the first step; the JSONL log beside the
# checkpoint (one record per logged step and per validation, appended on resume, records past
# the checkpoint dropped); `plot` drawing it to a PNG (checked by decoding it); --keep N
# keeping exactly N checkpoints plus the best by validation loss; `--resume DIR` with no other
# flag continuing the run exactly, flags given changing it (noted) except the shape
# (refused); --val FILE|DIR and `eval` giving the trainer's own figures; the end-of-run
# summary; export replacing a model only with --force and never a user's file; a new run refusing
# an earlier run's files beside its --out without --force; the CPU device line; prepare's
# progress lines off a terminal.
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
py=${KG_PYTHON:-/usr/bin/python3}
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
w=$(mktemp -d /tmp/test_train_log.XXXXXX)
trap 'rm -rf "$w"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$w"

# --version: "kogpt2-train X.Y.Z (commit C)"
"$B/kogpt2-train" --version > v.out
grep -Eq '^kogpt2-train [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{7,}|unknown)\)$' v.out ||
  fail "--version said: $(cat v.out)"
echo "version: $(cat v.out)"

# prepare's progress: off a terminal one line per 10 % on stderr (100 % last), stdout the summary
head -n 300 "$fx/corpus.txt" > small.txt
"$B/kogpt2-train" prepare --tokenizer "$fx/tok.model" --input small.txt --out data \
  --val-every-doc 10 > prep.out 2> prep.err
grep -q '^prepared 1 files' prep.out && tail -n 1 prep.err | grep -q '^prepare: 100% ' ||
  fail "prepare's progress: $(cat prep.err)"
# a pipe has no size: bytes and rate only, no percentage
# shellcheck disable=SC2002 # a pipe on purpose: it has no size
cat small.txt | "$B/kogpt2-train" prepare --tokenizer "$fx/tok.model" --input /dev/stdin \
  --out pipe > /dev/null 2> pipe.err
grep -Eq '^prepare: [0-9.]+ MB, [0-9.]+ MB/s$' pipe.err && ! grep -q '%' pipe.err ||
  fail "prepare's progress from a pipe: $(cat pipe.err)"
echo "prepare progress: $(tail -n 1 prep.err); from a pipe: $(tail -n 1 pipe.err)"

# a run: validation at step 0 and every 10 steps, checkpoints every 10 steps, the last 2 kept
tiny="--tokenizer $fx/tok.model --n-layer 2 --n-embd 32 --n-head 2 --n-ctx 32 --batch 4 --seq 16"
train() { # shellcheck disable=SC2086 # one word per flag
  "$B/kogpt2-train" train $tiny --lr 3e-3 --warmup 3 --threads 2 "$@"
}
train --data data --steps 30 --val-every 10 --save-every 10 --keep 2 --log-every 5 --out ck \
  > a.log
grep -q '^val step 0 loss [0-9.]* bpb [0-9.]*' a.log || fail "no validation at step 0"
# no GPU here (or a build without CUDA): the device line says so plainly, not the driver's error
grep -Eq '^device: cpu-[a-z0-9]+, 2 threads \(auto: (no GPU|built without CUDA); using the CPU\)$' \
  a.log || fail "device line: $(grep '^device' a.log)"
grep -q 'insufficient' a.log && fail "the driver's error in the device line"
grep -q '^done: step 30/30, 30 steps and 1920 tokens in .*; val loss .* bpb .*; best val loss .* at step [0-9]* -> ck.best; checkpoint ck (step 30)$' a.log ||
  fail "no end-of-run summary: $(tail -n 1 a.log)"
grep '^device' a.log
echo "summary: $(tail -n 1 a.log)"
# --keep 2: ck (step 30) and ck.step-20, nothing older; the best beside them
[ -f ck/train_state.bin ] && [ -f ck.step-20/train_state.bin ] && [ ! -e ck.step-10 ] &&
  [ "$(ls -d ck.step-* | wc -l)" = 1 ] && [ -f ck.best/model.safetensors ] ||
  fail "--keep 2 left: $(ls -d ck*)"
"$B/weights_cmp" ck.step-20 ck 1e9 > /dev/null # a whole checkpoint (weights readable)
echo "kept: $(ls -d ck ck.* | tr '\n' ' ')"

# the log: every line JSON; train records at steps 1, 5, 10, ... 30, val at 0, 10, 20, 30;
# the best model is the step with the lowest val loss, and its val.json says so
check_log() { # check_log LOG TRAIN_STEPS VAL_STEPS BEST_VAL_JSON
  "$py" - "$@" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
train = [r["step"] for r in recs if r["type"] == "train"]
val = [(r["step"], r["loss"]) for r in recs if r["type"] == "val"]
want_t = [int(s) for s in sys.argv[2].split(",")]
want_v = [int(s) for s in sys.argv[3].split(",")]
assert train == want_t, ("train steps", train, want_t)
assert [s for s, _ in val] == want_v, ("val steps", val, want_v)
for r in recs:
    if r["type"] == "train":
        assert r["loss"] > 0 and r["lr"] > 0 and r["tokens"] == 64 * r["step"], r
best = min(val, key=lambda v: v[1])
b = json.load(open(sys.argv[4]))
assert b["step"] == best[0] and abs(b["loss"] - best[1]) < 1e-5, (b, best)
types = [r["type"] for r in recs]
print("log: %d records (%s), best val %.4f at step %d" % (
    len(recs), ", ".join("%d %s" % (types.count(t), t) for t in sorted(set(types))), best[1], best[0]))
EOF
}
check_log ck.log.jsonl 1,5,10,15,20,25,30 0,10,20,30 ck.best/val.json || fail "the log's records"

# plot: a PNG (signature, CRCs, size) with both curves' colours in it
"$B/kogpt2-train" plot ck > plot.out
grep -q '^plot: 7 train and 4 val records of ck.log.jsonl -> ck.log.png$' plot.out ||
  fail "plot said: $(cat plot.out)"
"$py" - ck.log.png <<'EOF' || fail "ck.log.png is no plot"
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "signature"
pos, chunks = 8, {}
while pos < len(b):
    n, = struct.unpack(">I", b[pos:pos + 4]); t = b[pos + 4:pos + 8]; d = b[pos + 8:pos + 8 + n]
    assert struct.unpack(">I", b[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(t + d), t
    chunks[t] = chunks.get(t, b"") + d; pos += 12 + n
w, h, depth, kind = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
assert (w, h, depth, kind) == (1000, 600, 8, 2), (w, h, depth, kind)
raw = zlib.decompress(chunks[b"IDAT"])
rows = [raw[y * (3 * w + 1) + 1:(y + 1) * (3 * w + 1)] for y in range(h)]
px = [bytes(r[i:i + 3]) for r in rows for i in range(0, 3 * w, 3)]
train, val = px.count(bytes((31, 119, 180))), px.count(bytes((230, 110, 0)))
assert train > 500 and val > 500, ("curve pixels", train, val)
print("plot: %dx%d PNG, %d train-curve and %d val-curve pixels" % (w, h, train, val))
EOF

# --resume DIR alone: stopped at step 15 and resumed with no other flag, the same losses as
# the uninterrupted run; a record past the checkpoint (a killed run's) is dropped from the log
train --data data --steps 30 --val-every 10 --save-every 10 --log-every 5 --out r --stop-at 15 \
  > r1.log
grep -q '^stopped: step 15/30' r1.log || fail "no summary for a stopped run: $(tail -n 1 r1.log)"
echo '{"type":"train","step":16,"loss":99}' >> r.log.jsonl
printf '{"type":"train","st' >> r.log.jsonl # torn by a kill
"$B/kogpt2-train" train --resume r > r2.log
grep -q '^resumed r at step 15' r2.log || fail "--resume r alone: $(cat r2.log)"
grep '^step' a.log | cut -d' ' -f1-4 > a.loss
cat r1.log r2.log | grep '^step' | cut -d' ' -f1-4 > r.loss
diff a.loss r.loss > /dev/null || { diff a.loss r.loss; fail "resumed losses differ"; }
"$B/weights_cmp" ck r 0 > /dev/null
check_log r.log.jsonl 1,5,10,15,20,25,30 0,10,20,30 r.best/val.json > /dev/null 2>&1 ||
  { cat r.log.jsonl; fail "the resumed run's log"; }
echo "--resume r alone: $(wc -l < r.loss) loss lines as the uninterrupted run's, weights equal"
# flags given change the resumed run (noted); a shape flag that disagrees is refused
train_r() { "$B/kogpt2-train" train --resume r "$@"; }
train_r --steps 32 --lr 1e-3 > r3.log
grep -q "^note: --steps 32, the checkpoint's run planned 30" r3.log &&
  grep -q "^note: the checkpoint's run used --lr 0.003 .* now 0.001 " r3.log &&
  grep -q '^step 32/32 ' r3.log || fail "--resume r --steps 32 --lr 1e-3: $(cat r3.log)"
rc=0; train_r --steps 40 --n-embd 64 > r4.log 2>&1 || rc=$?
[ $rc = 1 ] && grep -q -- '--n-embd 64 disagrees with the checkpoint' r4.log ||
  fail "a shape change on resume gave $rc: $(cat r4.log)"
# --resume where there is no checkpoint, and an older checkpoint without train_args.json
rc=0; "$B/kogpt2-train" train --resume none > n.log 2>&1 || rc=$?
[ $rc = 1 ] && grep -q -- '--resume: no checkpoint in none' n.log || fail "--resume none: $rc"
mkdir old && cp r/* old/ && rm old/train_args.json
rc=0; "$B/kogpt2-train" train --resume old > o.log 2>&1 || rc=$?
[ $rc = 2 ] && grep -q -- '--data DIR is required: the checkpoint has no train_args.json' o.log ||
  fail "an older checkpoint resumed without --data: $rc $(cat o.log)"
echo "resume: no checkpoint (exit 1), an older one without --data (exit 2): said"

# --val FILE and --val DIR: the trainer's final figure is eval's on the same text and window
head -n 120 "$fx/corpus.txt" | tail -n 60 > held.txt
"$B/kogpt2-train" prepare --tokenizer "$fx/tok.model" --input held.txt --out held \
  --val-every-doc 1 > /dev/null 2>&1
for v in held.txt held; do
  train --data data --val "$v" --steps 5 --val-every 5 --save-every 0 --out "v_$v" > "v_$v.log"
  grep -q "^val: $v, 60 documents" "v_$v.log" || fail "--val $v: $(grep '^val' "v_$v.log")"
  last=$(grep '^val step 5 ' "v_$v.log" | cut -d' ' -f5,7)
  "$B/kogpt2-train" eval --model "v_$v" --val "$v" --seq 16 > "e_$v.out" 2>/dev/null
  got=$(awk '{ printf "%.4f %.4f", $3, $5 }' "e_$v.out")
  [ "$last" = "$got" ] || fail "--val $v: the trainer said $last, eval $got"
  echo "--val $v: trainer loss, bpb $last = eval's $got"
done
# the budget scores whole documents: bytes and bits cover the same ones
"$B/kogpt2-train" eval --model v_held --val held --seq 16 --val-tokens 100 > e_budget.out 2>/dev/null
awk '{ exit !($7 >= 100 && $7 < 200 && $11 < 60) }' e_budget.out ||
  fail "--val-tokens 100: $(cat e_budget.out)"

# a new run beside an earlier run's files (ck is gone, its log and best are not): refused;
# --force replaces them
rm -rf ck
rc=0; train --data data --steps 2 --out ck > f.log 2>&1 || rc=$?
[ $rc = 1 ] && grep -q 'is left from an earlier run into ck: a new run would replace it; --force' f.log ||
  fail "a new run beside old files gave $rc: $(cat f.log)"
train --data data --steps 2 --val-every 0 --out ck --force > f.log
[ ! -e ck.best ] && [ ! -e ck.step-20 ] && [ "$(grep -c '"type":"train"' ck.log.jsonl)" = 2 ] ||
  fail "--force left the earlier run's files: $(ls -d ck*)"
echo "an earlier run's files beside --out: refused, --force replaced them"

# export: a model is replaced only with --force; a file that is no model's (issue 32 item 4)
# and a checkpoint never
mkdir m && echo x > m/notes.txt
for force in "" --force; do
  rc=0; "$B/kogpt2-train" export --from r --out m $force > x.log 2>&1 || rc=$?
  [ $rc = 1 ] && grep -q -- '--out m holds notes.txt, which is no model.s file' x.log &&
    [ "$(ls m)" = notes.txt ] || fail "export $force into a user's directory gave $rc: $(cat x.log)"
done
"$B/kogpt2-train" export --from r --out m2 > /dev/null
rc=0; "$B/kogpt2-train" export --from r --out m2 > x.log 2>&1 || rc=$?
[ $rc = 1 ] && grep -q -- '--out m2 holds a model (.*): --force replaces it' x.log ||
  fail "export over a model without --force gave $rc: $(cat x.log)"
"$B/kogpt2-train" export --from r --out m2 --force > /dev/null || fail "export --force over a model"
rc=0; "$B/kogpt2-train" export --from r --out ck --force > x.log 2>&1 || rc=$?
[ $rc = 1 ] && grep -q 'holds a checkpoint' x.log || fail "export --force over a checkpoint: $rc"
echo "export: a model replaced with --force; a user's file and a checkpoint never"
echo PASS
