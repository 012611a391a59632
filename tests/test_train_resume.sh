#!/bin/sh
# test_train_resume.sh — resume equals uninterrupted: a 20-step run, and the same run
# stopped after step 10 (--stop-at, as an interruption) and continued with --resume, print
# identical losses and end with bit-identical weights. The data is small enough that the
# window stream crosses epoch boundaries. A checkpoint is never overwritten by accident:
# without --resume, with --resume where there is none, with a shape that disagrees, every run
# is refused before its first step and the checkpoint's bytes stay; --force overwrites on
# purpose; a crafted train_state.bin is refused naming the field. Also gradient accumulation through the CLI: --batch 2 --grad-accum 2 against
# --batch 4 (3 steps; weights within 1e-5).
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
w=$(mktemp -d /tmp/test_train_resume.XXXXXX)
trap 'rm -rf "$w"' EXIT
head -n 150 "$fx/corpus.txt" > "$w/small.txt"
"$B/kogpt2-train" prepare --tokenizer "$fx/tok.model" --input "$w/small.txt" --out "$w/data" \
  --val-every-doc 10 >/dev/null
run() {
  "$B/kogpt2-train" train --data "$w/data" --tokenizer "$fx/tok.model" --n-layer 2 \
    --n-embd 32 --n-head 2 --n-ctx 32 --batch 4 --seq 16 --lr 3e-3 --warmup 3 \
    --val-every 0 --threads 2 "$@"
}
run --steps 20 --save-every 7 --out "$w/a" > "$w/a.log"
run --steps 20 --save-every 7 --out "$w/b" --stop-at 10 > "$w/b1.log"
run --steps 20 --save-every 7 --out "$w/b" --resume > "$w/b2.log"
grep -q "resumed $w/b at step 10" "$w/b2.log" || { echo "FAIL: did not resume at step 10"; cat "$w/b2.log"; exit 1; }
grep '^step' "$w/a.log" | cut -d' ' -f1-4 > "$w/a.loss"
cat "$w/b1.log" "$w/b2.log" | grep '^step' | cut -d' ' -f1-4 > "$w/b.loss"
if ! diff "$w/a.loss" "$w/b.loss"; then
  echo "FAIL: resumed losses differ"; exit 1
fi
echo "resume: $(wc -l < "$w/a.loss") identical loss lines; last: $(tail -n 1 "$w/a.loss")"
"$B/weights_cmp" "$w/a" "$w/b" 0

# Nothing overwrites a trained checkpoint by accident (issue 13): each of these exits 1 before
# any step with a one-line reason, and the checkpoint's bytes stay as they were.
state_step() { od -An -t u8 -j 16 -N 8 "$1/train_state.bin" | tr -d ' '; }
sums() { cksum "$1"/* | sort; }
refused() { # refused DIR WANT COMMAND...: expect exit 1 saying WANT (one line), DIR untouched
  dir=$1 want=$2; shift 2
  before=$(sums "$dir" 2>/dev/null || true)
  rc=0; "$@" > "$w/r.log" 2>&1 || rc=$?
  if [ $rc != 1 ] || ! grep -qF -- "$want" "$w/r.log" || grep -q '^step ' "$w/r.log" ||
     [ "$(wc -l < "$w/r.log")" != 1 ] || [ "$(sums "$dir" 2>/dev/null || true)" != "$before" ]; then
    echo "FAIL: $* gave $rc, not a refusal saying '$want'"; cat "$w/r.log"; exit 1
  fi
  echo "refused: $(cat "$w/r.log")"
}
[ "$(state_step "$w/b")" = 20 ]
# a new run into a checkpoint, without --resume
refused "$w/b" 'holds a checkpoint (step 20): --resume continues it, --force' run --steps 20 \
  --out "$w/b"
# --resume where there is no checkpoint: none at all, and a model without train_state.bin
# (the old behaviour started from step 0 and overwrote model.safetensors)
refused "$w/none" '--resume: no checkpoint in' run --steps 20 --out "$w/none" --resume
[ ! -e "$w/none" ]
mkdir "$w/model" && cp "$w/b/config.json" "$w/b/model.safetensors" "$w/b/tok.model" "$w/model/"
refused "$w/model" 'but no train_state.bin' run --steps 20 --out "$w/model" --resume
refused "$w/model" 'holds a model (' run --steps 20 --out "$w/model"
# --resume with a shape that disagrees with the checkpoint's: named, with both values (run
# gives the checkpoint's own shape, which --resume accepted above; a later flag wins)
refused "$w/b" '--n-layer 3 disagrees with the checkpoint in '"$w/b"' (n_layer 2)' run \
  --steps 30 --out "$w/b" --resume --n-layer 3
refused "$w/b" '--n-ctx 64 disagrees' run --steps 30 --out "$w/b" --resume --n-ctx 64
# (only config.json is read before the refusal: a copy with another width will do)
mkdir "$w/wide" && sed 's/"n_embd":[[:space:]]*32/"n_embd": 64/' "$w/model/config.json" > "$w/wide/config.json"
refused "$w/b" "--init's n_embd 64 disagrees" "$B/kogpt2-train" train --data "$w/data" \
  --init "$w/wide" --batch 4 --seq 16 --steps 30 --out "$w/b" --resume
v2=${KG_SHARED_DIR:-}/data/kogpt2/v2/tokenizer.json
if [ -f "$v2" ]; then
  refused "$w/b" "--tokenizer's vocabulary 51200 disagrees" run --steps 30 --out "$w/b" \
    --resume --tokenizer "$v2"
fi
# a crafted train_state.bin (issue 24): a shard name outside --data (the old behaviour
# trained on ../other/train_000000.bin and exited 0) or a count of 0 is refused, naming it
mkdir "$w/other" "$w/c" && cp "$w/data/train_000000.bin" "$w/other/" && cp "$w/b/"* "$w/c/"
printf '../other/train_000000.bin\0' | dd of="$w/c/train_state.bin" bs=1 seek=120 conv=notrunc 2>/dev/null
refused "$w/c" "train_state.bin: shard name 0 '../other/train_000000.bin' is not a train shard" \
  run --steps 30 --out "$w/c" --resume
cp "$w/b/train_state.bin" "$w/c/"
printf '\0\0\0\0\0\0\0\0' | dd of="$w/c/train_state.bin" bs=1 seek=48 conv=notrunc 2>/dev/null
refused "$w/c" 'train_state.bin: B (--batch) is 0' run --steps 30 --out "$w/c" --resume
# --force starts over on purpose; with --resume it resumes when it can, else starts over
run --steps 2 --out "$w/b" --force > "$w/f.log"
grep -q '^step 1/2' "$w/f.log" && [ "$(state_step "$w/b")" = 2 ] ||
  { echo "FAIL: --force did not start over"; cat "$w/f.log"; exit 1; }
run --steps 3 --out "$w/b" --force --resume > "$w/f.log"
grep -q "^resumed $w/b at step 2" "$w/f.log" && [ "$(state_step "$w/b")" = 3 ] ||
  { echo "FAIL: --force --resume did not resume"; cat "$w/f.log"; exit 1; }
run --steps 2 --out "$w/model" --force --resume > "$w/f.log"
grep -q '^step 1/2' "$w/f.log" && [ "$(state_step "$w/model")" = 2 ] ||
  { echo "FAIL: --force --resume did not start over"; cat "$w/f.log"; exit 1; }
echo "--force: started over; with --resume: resumed at step 2, or started over"

run --steps 3 --save-every 0 --batch 2 --grad-accum 2 --out "$w/acc" > "$w/acc.log"
run --steps 3 --save-every 0 --out "$w/one" > "$w/one.log"
echo "accum losses: $(grep '^step' "$w/acc.log" | cut -d' ' -f4 | tr '\n' ' ')"
echo "2B losses:    $(grep '^step' "$w/one.log" | cut -d' ' -f4 | tr '\n' ' ')"
"$B/weights_cmp" "$w/acc" "$w/one" 1e-5
echo PASS
