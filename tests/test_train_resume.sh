#!/bin/sh
# test_train_resume.sh — resume equals uninterrupted: a 20-step run, and the same run
# stopped after step 10 (--stop-at, as an interruption) and continued with --resume, print
# identical losses and end with bit-identical weights. The data is small enough that the
# window stream crosses epoch boundaries. Also gradient accumulation through the CLI:
# --batch 2 --grad-accum 2 against --batch 4 (3 steps; weights within 1e-5).
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
"$B/test_train_cmp" "$w/a" "$w/b" 0

run --steps 3 --save-every 0 --batch 2 --grad-accum 2 --out "$w/acc" > "$w/acc.log"
run --steps 3 --save-every 0 --out "$w/one" > "$w/one.log"
echo "accum losses: $(grep '^step' "$w/acc.log" | cut -d' ' -f4 | tr '\n' ' ')"
echo "2B losses:    $(grep '^step' "$w/one.log" | cut -d' ' -f4 | tr '\n' ' ')"
"$B/test_train_cmp" "$w/acc" "$w/one" 1e-5
echo PASS
