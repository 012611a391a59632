#!/bin/sh
# models/eval_bpb.sh — bits per byte of a model on a text file, next to general-purpose
# compressors on the same bytes.
#
#   models/eval_bpb.sh MODEL_DIR TEXT_FILE [BUILD_DIR]      (default: build; needs kogpt2-train)
#   environment: SEQ (256: the scoring window), THREADS (0: all cores), DEVICE (cpu),
#   NOCOMP=1 (the model only, no compressors)
#
# The model's figure is what `kogpt2-train train` prints as "val ... bpb" (mean loss in nats
# per token / ln 2 x tokens / bytes), with TEXT_FILE as the whole validation set: each line is
# a document (its tokens then EOS), read in order as windows of SEQ+1 tokens, every token
# scored once with the tokens before it in its window as context (the first of a window has
# none). The model is not changed: one step at learning rate 0 and weight decay 0 (the
# trainer validates only after a step), on a throwaway train shard, then the validation.
# Compressors: xz -9, zstd -19 --long, 7z PPMd (-mx=9), their output bytes x 8 / input bytes.
set -eu
[ $# -ge 2 ] || { sed -n '2,7p' "$0"; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
model=$(cd "$1" && pwd)
text=$2
B=$(cd "${3:-$root/build}" && pwd)
seq=${SEQ:-256}
threads=${THREADS:-0}
device=${DEVICE:-cpu}
[ -x "$B/kogpt2-train" ] || { echo "no $B/kogpt2-train: build first"; exit 1; }
[ -s "$text" ] || { echo "no text at $text"; exit 1; }
tok=$(ls "$model"/*.model "$model"/*.spiece "$model"/tokenizer.json 2>/dev/null | head -n 1)
[ -n "$tok" ] || { echo "no tokenizer in $model"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# validation shards: every line of TEXT_FILE; a train shard of filler that is never used
"$B/kogpt2-train" prepare --tokenizer "$tok" --input "$text" --out "$tmp/data" \
  --val-every-doc 1 > "$tmp/prepare.log"
i=0
while [ $i -lt $((seq / 2 + 16)) ]; do printf '가나다라 마바사 아자차카 타파하. '; i=$((i + 1)); done \
  > "$tmp/filler.txt"
"$B/kogpt2-train" prepare --tokenizer "$tok" --input "$tmp/filler.txt" --out "$tmp/data" --append \
  --val-every-doc 0 > /dev/null
"$B/kogpt2-train" train --init "$model" --data "$tmp/data" --out "$tmp/ckpt" --steps 1 \
  --batch 8 --seq "$seq" --lr 0 --min-lr 0 --warmup 0 --weight-decay 0 --val-every 1 \
  --val-tokens 1000000000 --save-every 0 --threads "$threads" --device "$device" \
  > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
val=$(grep '^val step' "$tmp/train.log" | tail -n 1)
[ -n "$val" ] || { cat "$tmp/train.log"; exit 1; }

bytes=$(wc -c < "$text")
echo "text: $text, $bytes bytes, $(sed 's/^prepared [0-9]* files, //; s/: train.*val / -> /; s/ in .*//' "$tmp/prepare.log")"
echo "model: $model ($(grep '^model:' "$tmp/train.log" | sed 's/^model: //; s/; activations.*//'))"
echo "$val" | awk -v s="$seq" '{ printf "model            %.4f bits per byte (%s nats/token, windows of %d tokens)\n", $7, $5, s }'
[ "${NOCOMP:-0}" = 1 ] && exit 0
xz_b=$(xz -9 -c < "$text" | wc -c)
zstd_b=$(zstd -q -19 --long -c < "$text" | wc -c)
ppmd_b=
if command -v 7z > /dev/null; then
  cp "$text" "$tmp/t.txt"
  (cd "$tmp" && 7z a -bd -m0=PPMd -mx=9 t.7z t.txt > /dev/null) && ppmd_b=$(wc -c < "$tmp/t.7z")
fi
awk -v v="$bytes" -v x="$xz_b" 'BEGIN { printf "xz -9            %.4f bits per byte (%d bytes)\n", 8 * x / v, x }'
awk -v v="$bytes" -v x="$zstd_b" 'BEGIN { printf "zstd -19 --long  %.4f bits per byte (%d bytes)\n", 8 * x / v, x }'
if [ -n "$ppmd_b" ]; then
  awk -v v="$bytes" -v x="$ppmd_b" 'BEGIN { printf "7z PPMd -mx=9    %.4f bits per byte (%d bytes)\n", 8 * x / v, x }'
else
  echo "7z PPMd          (no 7z: apt-get install p7zip-full)"
fi
