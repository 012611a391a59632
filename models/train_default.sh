#!/bin/sh
# models/train_default.sh — reproduces models/default/ (the Korean GPT-2 that kogpt2d and
# kogpt2 serve when no --model is given) from ../shared/data/corpora.
#
#   models/train_default.sh [BUILD_DIR]          (default: build; needs kogpt2-train)
#   environment: STEPS (2300; v0: 6000), SHAPE (v1; v0: the small CPU shape), DEVICE (auto: a
#   GPU when there is one), THREADS (0: all cores), WORK (BUILD_DIR/train-default: the
#   tokenizer text, shards and checkpoints), OUT (models/default), CORPORA (../shared/data/corpora),
#   NP (1: ranks under mpirun, for a -DKG_MPI=ON build; --batch is per rank)
#
# Steps (each is skipped when its output is already in WORK, so a rerun continues):
#  1. Tokenizer: Debian's spm_train (package sentencepiece) on the training text, 12,000
#     pieces, BPE, byte_fallback (no <unk>: any byte sequence round-trips), identity
#     normalization (NFKC would turn the compatibility jamo of "ㅋㅋ" into conjoining jamo).
#     BPE rather than unigram: the same family as KoGPT2's own tokenizers (v1 SentencePiece
#     BPE, v2 byte-level BPE), so the Explorer's pieces read alike; its merges are
#     deterministic. Whitespace is kept as written (--remove_extra_whitespaces=false, and
#     --allow_whitespace_only_pieces for runs of spaces): runs of spaces, leading and trailing
#     spaces, tabs and newlines (byte pieces) round-trip byte for byte. Every 100th line is
#     left out of the tokenizer text (approximately the held-out documents; the tokenizer sees
#     only piece statistics, never trains the model).
#  2. Shards: `kogpt2-train prepare`, every 100th document held out for validation
#     (WORK/data/val_*.txt is that text; it is never trained on).
#  3. Training (v1): 5 layers x 384 wide, 6 heads, n_ctx 512, 12,000 vocab = 13.7 M
#     parameters (27.4 MB in f16, under the 30 MB budget); batch 32 x 512 tokens, AdamW lr
#     1e-3 with 200 warmup steps and cosine decay to 1e-4, weight decay 0.1, grad clip 1.0,
#     bf16 matmuls on a GPU; validation and a checkpoint every 100 steps; --resume continues
#     an interrupted run exactly. 2,300 steps = 37.7 M tokens (~2.5 epochs of the ~15.1 M
#     training tokens): ~5 minutes on one H100. On CPUs the same steps take days: STEPS and
#     SHAPE=v0 (6 x 256, batch 16 x 256, 7.9 M parameters, ~2.4 s a step on 2 cores) give the
#     old CPU recipe.
#  4. Export: f16 model.safetensors + config.json + the tokenizer into OUT, with
#     models/default/tokenizer_config.json (its chat template) copied when OUT is elsewhere
#     (other files there, such as the model card README.md, are left alone), then the validation figures:
#     the model's bits per byte on the held-out text next to `xz -9` on the same text.
#
# Data (see ../shared/data/corpora/README.md for sources and licenses): nsmc (movie reviews,
# CC0), boddari (Wikinews, UNESCO reports, book reviews, fairy tales; CC BY / CC BY-SA),
# debian_ko (Korean lines of Debian packages; MPL/GFDL/...), chatbot_data (Q/A pairs, MIT;
# each pair one document: the question line, then the answer line). Left out:
# korean_hate_speech (toxic content: never used for training) and the evaluation sets
# (klue_dev, kor_nlu, question_pair). chatbot_data comes last so that the held-out documents
# of the other corpora are the same as v0's.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
B=$(cd "${1:-$root/build}" && pwd)
corpora=${CORPORA:-$root/../shared/data/corpora}
work=${WORK:-$B/train-default}
out=${OUT:-$root/models/default}
shape=${SHAPE:-v1}
device=${DEVICE:-auto}
if [ "$shape" = v0 ]; then
  steps=${STEPS:-6000}
  model_flags="--n-layer 6 --n-embd 256 --n-head 8 --batch $((16 / ${NP:-1})) --seq 256"
  sched_flags="--warmup 400 --val-every 500 --save-every 500"
else
  steps=${STEPS:-2300}
  model_flags="--n-layer 5 --n-embd 384 --n-head 6 --batch $((32 / ${NP:-1})) --seq 512 --precision bf16"
  sched_flags="--warmup 200 --val-every 100 --save-every 100"
fi
threads=${THREADS:-0}
np=${NP:-1}
[ -x "$B/kogpt2-train" ] || { echo "no $B/kogpt2-train: build first"; exit 1; }
command -v spm_train >/dev/null || { echo "spm_train missing: apt-get install sentencepiece"; exit 1; }
[ -d "$corpora/nsmc" ] || { echo "no corpora at $corpora"; exit 1; }
inputs="$corpora/nsmc/nsmc_raw_reviews.tsv.gz $corpora/boddari $corpora/debian_ko $corpora/chatbot_data/ChatbotData.csv"
tok=$work/kogpt2-default.model
mkdir -p "$work"
start=$(date +%s)

# 1. tokenizer
if [ ! -f "$tok" ]; then
  echo "== tokenizer: spm_train on $work/spm_text.txt"
  {
    zcat "$corpora/nsmc/nsmc_raw_reviews.tsv.gz" | tail -n +2 | cut -f5
    cat "$corpora"/boddari/*.txt "$corpora"/boddari/*.csv "$corpora"/debian_ko/*.txt
    tail -n +2 "$corpora/chatbot_data/ChatbotData.csv" | python3 -c '
import csv, sys
for r in csv.reader(sys.stdin):
    print(*r[:2], sep="\n")'
  } | awk 'NR % 100 != 0 && NF > 0' > "$work/spm_text.txt"
  spm_train --input="$work/spm_text.txt" --model_prefix="$work/kogpt2-default" \
    --vocab_size=12000 --model_type=bpe --byte_fallback=true --character_coverage=0.9995 \
    --normalization_rule_name=identity --remove_extra_whitespaces=false \
    --allow_whitespace_only_pieces=true --input_sentence_size=3000000 \
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
# shellcheck disable=SC2086 # one word per flag
$launch "$B/kogpt2-train" train --data "$work/data" --out "$work/ckpt" --tokenizer "$tok" \
  $model_flags --n-ctx 512 --steps "$steps" --lr 1e-3 --min-lr 1e-4 $sched_flags \
  --weight-decay 0.1 --clip 1.0 --seed 1337 --val-tokens 262144 --threads "$threads" \
  --device "$device" --resume --force | tee -a "$work/train.log"

# 4. export and figures
echo "== export f16 -> $out"
rm -rf "$work/export"
"$B/kogpt2-train" export --from "$work/ckpt" --out "$work/export" --dtype f16
mkdir -p "$out"
cp "$work/export/config.json" "$work/export/model.safetensors" "$tok" "$out/"
# the chat template it is trained for (the chatbot_data documents: question line, answer line,
# </s>), kept in the repository beside the weights
[ "$out/tokenizer_config.json" -ef "$root/models/default/tokenizer_config.json" ] ||
  cp "$root/models/default/tokenizer_config.json" "$out/"
val_bytes=$(cat "$work"/data/val_*.txt | wc -c)
xz_bytes=$(cat "$work"/data/val_*.txt | xz -9 -c | wc -c)
echo "== figures"
grep '^model:' "$work/train.log" | tail -n 1
grep '^val step' "$work/train.log" | tail -n 1
awk -v v="$val_bytes" -v x="$xz_bytes" \
  'BEGIN { printf "xz -9 on the same held-out text: %d -> %d bytes = %.4f bits per byte\n", v, x, 8 * x / v }'
du -b "$out/model.safetensors"
echo "elapsed this run: $(($(date +%s) - start)) s"
