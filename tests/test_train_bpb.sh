#!/bin/sh
# test_train_bpb.sh — one definition of validation bits per byte (issue 29, item 15): on the
# default model and real held-out text, the trainer's validation before its first step
# (`train --init`), `kogpt2-train eval` on the prepared directory and on the held-out text
# file, and models/eval_bpb.sh all give the same loss and bits per byte, and the bytes counted
# are the text file's size (the default tokenizer gives the text back byte for byte). Before,
# the trainer scaled a mean over its --val-tokens budget by the whole split's tokens per byte,
# and eval_bpb.sh used other windows, so the two disagreed on the same model and text.
# The text is held out from the default model: tests/data/nsmc_heldout.txt (the start of its
# held-out split, as in test_gpt2_quant_quality.sh), prepared with every second document
# held out again: 148 documents to validate on, the other 148 for the one training step.
set -eu
src=${KG_SOURCE_DIR:?}
B=${KG_BUILD_DIR:?}
model=$src/models/default
w=$(mktemp -d /tmp/test_train_bpb.XXXXXX)
trap 'rm -rf "$w"' EXIT
"$B/kogpt2-train" prepare --tokenizer "$model/kogpt2-default.model" \
  --input "$src/tests/data/nsmc_heldout.txt" --out "$w/data" --val-every-doc 2 > /dev/null 2>&1
text=$w/data/val_000000.txt
seq=256
ev() { "$B/kogpt2-train" eval --model "$model" --seq $seq --threads 2 --device cpu "$@" 2>/dev/null; }
# "eval loss L bpb B tokens N bytes N docs N seq T" -> "L B bytes"
ev --val "$w/data" | awk '{ printf "%.4f %.4f %d\n", $3, $5, $9 }' > "$w/dir"
ev --val "$text" | awk '{ printf "%.4f %.4f %d\n", $3, $5, $9 }' > "$w/file"
for t in "$text" "$w/data"; do # the held-out text file, and the prepared directory
  SEQ=$seq NOCOMP=1 THREADS=2 sh "$src/models/eval_bpb.sh" "$model" "$t" "$B"
done > "$w/script"
awk '/^model  / { printf "%.4f %.4f %d\n", substr($6, 2), $2, $(NF - 1) }' "$w/script" |
  uniq > "$w/sh" # one line when the two agree
"$B/kogpt2-train" train --init "$model" --data "$w/data" --out "$w/ck" --steps 1 --batch 2 \
  --seq $seq --val-every 1 --val-tokens 0 --save-every 0 --threads 2 --device cpu > "$w/train.log"
grep '^val step 0 ' "$w/train.log" | awk -v b="$(wc -c < "$text")" '{ printf "%s %s %d\n", $5, $7, b }' \
  > "$w/train"
echo "held-out text: $(wc -c < "$text") bytes, $(wc -l < "$text") documents; windows of $seq"
for k in train dir file sh; do echo "  $k: $(cat "$w/$k")  (loss, bpb, bytes)"; done
[ "$(cat "$w/dir")" = "$(cat "$w/train")" ] && [ "$(cat "$w/file")" = "$(cat "$w/train")" ] &&
  [ "$(cat "$w/sh")" = "$(cat "$w/train")" ] ||
  { echo "FAIL: the trainer, eval and eval_bpb.sh disagree"; cat "$w/script"; exit 1; }
echo PASS
