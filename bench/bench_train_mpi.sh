#!/bin/sh
# bench_train_mpi.sh — data-parallel speed of kogpt2-train: 1 rank x 2 threads against
# 2 ranks x 1 thread (mpirun), the same global batch (8 x 64 tokens) and the default model's
# layer shape (6 x 256, 8 heads). Prints ms/step and tok/s (mean over steps 3..N); figures
# only. Needs a -DKG_MPI=ON build and mpirun (openmpi-bin).
#   bench/bench_train_mpi.sh [BUILD_DIR] [TOKENIZER] [STEPS]
# TOKENIZER defaults to models/default's, else the test fixture's (build/testdata/train).
set -eu
B=${1:-build}
tok=${2:-}
steps=${3:-12}
[ -n "$tok" ] || tok=$(ls models/default/*.model 2>/dev/null | head -n 1 || true)
[ -n "$tok" ] || tok=$B/testdata/train/tok.model
[ -f "$tok" ] || { echo "no tokenizer (run ctest -L train once, or pass one)"; exit 1; }
w=$(mktemp -d /tmp/bench_train_mpi.XXXXXX)
trap 'rm -rf "$w"' EXIT
awk 'BEGIN { srand(3); split("가 나 다 라 마 바 사 아 자 차 카 타 파 하 강 산 물 불 돌 집", s, " ");
  for (i = 0; i < 20000; i++) { l = ""; for (j = 0; j < 12; j++) l = l s[int(rand() * 20) + 1] (rand() < 0.3 ? " " : "");
  print l } }' > "$w/corpus.txt"
"$B/kogpt2-train" prepare --tokenizer "$tok" --input "$w/corpus.txt" --out "$w/data" > /dev/null
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
common="--data $w/data --tokenizer $tok --n-layer 6 --n-embd 256 --n-head 8 --n-ctx 64 --seq 64
  --steps $steps --val-every 0 --save-every 0"
report() { # LABEL LOG
  awk -v label="$1" '/^step/ { n++; if (n > 2) { ms += $12; tok += $10; k++ } }
    END { printf "%-22s %8.1f ms/step %9.0f tok/s\n", label, ms / k, tok / k }' "$2"
}
"$B/kogpt2-train" train $common --batch 8 --threads 2 --out "$w/r1" > "$w/r1.log"
report "1 rank  x 2 threads" "$w/r1.log"
mpirun -np 2 --oversubscribe $root "$B/kogpt2-train" train $common --batch 4 --threads 1 \
  --out "$w/r2" > "$w/r2.log"
report "2 ranks x 1 thread" "$w/r2.log"
