#!/bin/sh
# models/eval_bpb.sh — bits per byte of a model on a text file, next to general-purpose
# compressors on the same bytes.
#
#   models/eval_bpb.sh MODEL_DIR TEXT_FILE|DATA_DIR [BUILD_DIR]  (default: build; needs kogpt2-train)
#   environment: SEQ (the scoring window; default the model's n_ctx), THREADS (0: all cores),
#   DEVICE (cpu), NOCOMP=1 (the model only, no compressors)
#
# The model's figure is `kogpt2-train eval` (train/val.h), the same code and definition as the
# trainer's validation ("val step N loss L bpb B"): each line of TEXT_FILE is a document (its
# tokens, then EOS for its newline), every token is scored once, in windows of SEQ tokens,
# and bpb = the tokens' nats / ln 2 / the text's UTF-8 bytes. DATA_DIR, a prepared directory,
# scores its held-out split (val_*.bin) exactly as the trainer validates it, its documents as
# prepare cut them (a CSV record with several text fields is one document over several lines
# of val_*.txt), so a checkpoint scored here gives what `train --seq SEQ --val-tokens 0`
# printed for it; the compressors then get val_*.txt.
# Compressors: xz -9, zstd -19 --long, 7z PPMd (-mx=9), their output bytes x 8 / input bytes.
set -eu
[ $# -ge 2 ] || { sed -n '2,7p' "$0"; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
model=$(cd "$1" && pwd)
text=$2
B=$(cd "${3:-$root/build}" && pwd)
threads=${THREADS:-0}
device=${DEVICE:-cpu}
[ -x "$B/kogpt2-train" ] || { echo "no $B/kogpt2-train: build first"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
val=$text
if [ -d "$text" ]; then # a prepared directory: its held-out text for the compressors
  cat "$text"/val_*.txt > "$tmp/val.txt" 2>/dev/null || { echo "no val_*.txt in $text"; exit 1; }
  text=$tmp/val.txt
fi
[ -s "$text" ] || { echo "no text at $text"; exit 1; }

# "eval loss L bpb B tokens N bytes N docs N seq T"
"$B/kogpt2-train" eval --model "$model" --val "$val" ${SEQ:+--seq "$SEQ"} --threads "$threads" \
  --device "$device" > "$tmp/eval.out" 2> "$tmp/eval.err" || { cat "$tmp/eval.err"; exit 1; }
read -r _ _ loss _ bpb _ tokens _ vbytes _ docs _ seq < "$tmp/eval.out"
bytes=$(wc -c < "$text")
echo "text: $val, $bytes bytes, $docs documents -> $tokens tokens"
grep -v '^device:' "$tmp/eval.err" || true # a note when the tokenizer does not round-trip it
echo "model: $model"
awk -v b="$bpb" -v l="$loss" -v s="$seq" -v v="$vbytes" \
  'BEGIN { printf "model            %.4f bits per byte (%.4f nats/token, windows of %d tokens, %d bytes)\n", b, l, s, v }'
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
