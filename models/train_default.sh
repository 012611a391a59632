#!/bin/sh
# models/train_default.sh — reproduces models/default/ (the Korean GPT-2 that kogpt2d and
# kogpt2 serve when no --model is given) from ../shared/data/corpora.
#
#   models/train_default.sh [BUILD_DIR]          (default: build; needs kogpt2-train)
#   environment: STEPS (6000), THREADS (0: all cores), WORK (BUILD_DIR/train-default: the
#   tokenizer text, shards and checkpoints), OUT (models/default), CORPORA (../shared/data/corpora),
#   NP (1: ranks under mpirun, for a -DKG_MPI=ON build; --batch is per rank)
#
# Steps (each is skipped when its output is already in WORK, so a rerun continues):
#  1. Tokenizer: Debian's spm_train (package sentencepiece) on the training text, 12,000
#     pieces, BPE, byte_fallback (no <unk>: any byte sequence round-trips), identity
#     normalization (NFKC would turn the compatibility jamo of "ㅋㅋ" into conjoining jamo).
#     BPE rather than unigram: the same family as KoGPT2's own tokenizers (v1 SentencePiece
#     BPE, v2 byte-level BPE), so the Explorer's pieces read alike; its merges are
#     deterministic. Every 100th line is left out of the tokenizer text (approximately the
#     held-out documents; the tokenizer sees only piece statistics, never trains the model).
#  2. Shards: `kogpt2-train prepare`, every 100th document held out for validation
#     (WORK/data/val_*.txt is that text; it is never trained on).
#  3. Training: 6 layers x 256 wide, 8 heads, n_ctx 512, 12,000 vocab = 7.9 M parameters
#     (15.8 MB in f16, under the 20 MB budget); batch 16 x 256 tokens, AdamW lr 1e-3 with
#     400 warmup steps and cosine decay to 1e-4, weight decay 0.1, grad clip 1.0; validation
#     and a checkpoint every 500 steps; --resume continues an interrupted run exactly.
#     The corpus is ~14.8 M training tokens (~3,600 steps an epoch); on 2 CPU cores a step
#     takes ~2.4 s, so the default 6,000 steps (~1.7 epochs) take about 4 hours.
#  4. Export: f16 model.safetensors + config.json + the tokenizer into OUT (other files
#     there, such as the model card README.md, are left alone), then the validation figures:
#     the model's bits per byte on the held-out text next to `xz -9` on the same text.
#
# Data (see ../shared/data/corpora/README.md for sources and licenses): nsmc (movie reviews,
# CC0), boddari (Wikinews, UNESCO reports, book reviews, fairy tales; CC BY / CC BY-SA),
# debian_ko (Korean lines of Debian packages; MPL/GFDL/...). Left out: korean_hate_speech
# (toxic content: never used for training), the evaluation sets (klue_dev, kor_nlu,
# question_pair) and chatbot_data (kept for fine-tuning).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$root/build}" && pwd)
corpora=${CORPORA:-$root/../shared/data/corpora}
work=${WORK:-$B/train-default}
out=${OUT:-$root/models/default}
steps=${STEPS:-6000}
threads=${THREADS:-0}
np=${NP:-1}
[ -x "$B/kogpt2-train" ] || { echo "no $B/kogpt2-train: build first"; exit 1; }
command -v spm_train >/dev/null || { echo "spm_train missing: apt-get install sentencepiece"; exit 1; }
[ -d "$corpora/nsmc" ] || { echo "no corpora at $corpora"; exit 1; }
inputs="$corpora/nsmc/nsmc_raw_reviews.tsv.gz $corpora/boddari $corpora/debian_ko"
tok=$work/kogpt2-default.model
mkdir -p "$work"
start=$(date +%s)

# 1. tokenizer
if [ ! -f "$tok" ]; then
  echo "== tokenizer: spm_train on $work/spm_text.txt"
  {
    zcat "$corpora/nsmc/nsmc_raw_reviews.tsv.gz" | tail -n +2 | cut -f5
    cat "$corpora"/boddari/*.txt "$corpora"/boddari/*.csv "$corpora"/debian_ko/*.txt
  } | awk 'NR % 100 != 0 && NF > 0' > "$work/spm_text.txt"
  spm_train --input="$work/spm_text.txt" --model_prefix="$work/kogpt2-default" \
    --vocab_size=12000 --model_type=bpe --byte_fallback=true --character_coverage=0.9995 \
    --normalization_rule_name=identity --input_sentence_size=3000000 \
    --shuffle_input_sentence=true --max_sentence_length=8192 \
    --num_threads="$(nproc)" --minloglevel=1 > "$work/spm_train.log" 2>&1
fi

# 2. shards
if [ ! -f "$work/data/STAMP" ]; then
  echo "== prepare: $inputs"
  rm -rf "$work/data"
  # shellcheck disable=SC2086 # one word per input
  "$B/kogpt2-train" prepare --tokenizer "$tok" $(for i in $inputs; do echo --input "$i"; done) \
    --out "$work/data" --val-every-doc 100 | tee "$work/prepare.log"
  touch "$work/data/STAMP"
fi

# 3. training
echo "== train: $steps steps -> $work/ckpt (log: $work/train.log)"
launch=
if [ "$np" -gt 1 ]; then
  launch="mpirun -np $np"
  [ "$(id -u)" = 0 ] && launch="$launch --allow-run-as-root"
fi
$launch "$B/kogpt2-train" train --data "$work/data" --out "$work/ckpt" --tokenizer "$tok" \
  --n-layer 6 --n-embd 256 --n-head 8 --n-ctx 512 --steps "$steps" --batch $((16 / np)) \
  --seq 256 --lr 1e-3 --min-lr 1e-4 --warmup 400 --weight-decay 0.1 --clip 1.0 --seed 1337 \
  --val-every 500 --val-tokens 262144 --save-every 500 --threads "$threads" --resume \
  | tee -a "$work/train.log"

# 4. export and figures
echo "== export f16 -> $out"
rm -rf "$work/export"
"$B/kogpt2-train" export --from "$work/ckpt" --out "$work/export" --dtype f16
mkdir -p "$out"
cp "$work/export/config.json" "$work/export/model.safetensors" "$tok" "$out/"
val_bytes=$(cat "$work"/data/val_*.txt | wc -c)
xz_bytes=$(cat "$work"/data/val_*.txt | xz -9 -c | wc -c)
echo "== figures"
grep '^model:' "$work/train.log" | tail -n 1
grep '^val step' "$work/train.log" | tail -n 1
awk -v v="$val_bytes" -v x="$xz_bytes" \
  'BEGIN { printf "xz -9 on the same held-out text: %d -> %d bytes = %.4f bits per byte\n", v, x, 8 * x / v }'
du -b "$out/model.safetensors"
echo "elapsed this run: $(($(date +%s) - start)) s"
