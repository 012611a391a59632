#!/usr/bin/env bash
# scripts/gpu_check.sh [BUILD_DIR] [LOG_DIR] — everything the CUDA backend needs checked and
# measured on a machine with an NVIDIA GPU, in one go, each step bounded in time:
#   1. ctest -L gpu: libkgcuda.so's door and op table, every op against the CPU backend, the
#      KoGPT2-base forward, an injected kernel fault, kogpt2d's e2e and abuse tests with
#      --device cuda, what --device auto maps on a GPU machine
#   2. the trainer's tests on the GPU (resume must continue bit for bit)
#   3. compute-sanitizer: memcheck over every op and the whole model, racecheck over the
#      attention ops
#   4. bench_cuda (decode, prompt, batched decode, training step and MFU), one decode and one
#      training step profiled by ncu (each kernel's time), bench_server (the Explorer's click)
# BUILD_DIR (build) must be a CUDA build (scripts/build.sh finds nvcc in /usr/local/cuda).
# Logs go to LOG_DIR (build/gpu-check); the last lines printed are the summary. Results of
# a run are kept under bench/results/<machine>-<date>/ (see h100-2026-11-24/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:-build}" && pwd)
L=${2:-$B/gpu-check}
mkdir -p "$L"
: > "$L/summary"
export PATH="$PATH:/usr/local/cuda/bin"
[ -x "$B/test_cuda_ops" ] || { echo "no $B/test_cuda_ops: not a CUDA build"; exit 2; }
# the CUDA backend is a library beside the programs, opened when a GPU is asked for: a copy of
# the build (the bundle a GPU machine gets) must carry it
[ -f "$B/libkgcuda.so" ] || { echo "no $B/libkgcuda.so beside the programs (copy it too)"; exit 2; }
nvidia-smi > "$L/nvidia-smi.log" 2>&1 || { echo "no GPU (nvidia-smi failed)"; exit 77; }

# step NAME SECONDS CMD...: CMD's output in LOG_DIR/NAME.log, one summary line
step() {
  local n=$1 s=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout -k 5 "$s" "$@" > "$L/$n.log" 2>&1
  rc=$?
  echo "$n: exit $rc, $(($(date +%s) - t0)) s" | tee -a "$L/summary"
}

step gpu_ctest 600 ctest --test-dir "$B" -L gpu -j 3 --output-on-failure
step train_ctest 300 ctest --test-dir "$B" -R 'test_train_(resume|kill|e2e)' --output-on-failure
step memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/test_cuda_ops"
step memcheck_model 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/test_cuda_model"
step racecheck 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/test_cuda_ops" \
  attention
step bench_cuda 300 "$B/bench_cuda"
step ncu 300 ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
  "$B/bench_cuda" --profile
step bench_server 300 "$B/bench_server" --shape base --seconds 4

echo "== summary"
cat "$L/summary"
grep -hE "tests passed|Failed" "$L/gpu_ctest.log" "$L/train_ctest.log"
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$L/memcheck.log" "$L/memcheck_model.log" \
  "$L/racecheck.log"
grep -vE "^  " "$L/bench_cuda.log" | tail -n 14
grep -E "click|generate" "$L/bench_server.log"
