#!/bin/sh
# bench_vs_llama.sh — our CPU backend and llama.cpp on the same weights, in turns, in the same
# run: bench_model (prefill 20/64/512, decode 128) and llama-bench (pp20, pp512, tg128) on
# the KoGPT2-base shape in f32 and f16. Figures only, never pass/fail; the turns show how
# much the machine drifted while they ran.
#
#   bench/bench_vs_llama.sh LLAMA_CPP [BUILD_DIR [THREADS [ROUNDS]]]
#
# LLAMA_CPP: a llama.cpp source tree with llama-bench built in LLAMA_CPP/build/bin (CPU:
# cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON; cmake --build build --target
# llama-bench), or LLAMA_BENCH=path/to/llama-bench. Its gguf-py writes the GGUF files
# (bench/gguf_from_hf.py, python3-numpy). BUILD_DIR: build (relative to the repository
# root); THREADS: 2; ROUNDS: 2.
set -eu
llama=${1:?usage: bench/bench_vs_llama.sh LLAMA_CPP [BUILD_DIR [THREADS [ROUNDS]]]}
llama=$(cd "$llama" && pwd)
cd "$(dirname "$0")/.."
build=${2:-build}
threads=${3:-2}
rounds=${4:-2}
py=${KG_PYTHON:-/usr/bin/python3}
llama_bench=${LLAMA_BENCH:-$llama/build/bin/llama-bench}
[ -x "$llama_bench" ] || { echo "bench_vs_llama: no llama-bench at $llama_bench" >&2; exit 2; }
[ -d "$llama/gguf-py" ] || { echo "bench_vs_llama: no $llama/gguf-py" >&2; exit 2; }
dir=/tmp/kg-bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "llama.cpp: $(git -C "$llama" rev-parse --short HEAD 2>/dev/null || echo "$llama")"
round=1
while [ "$round" -le "$rounds" ]; do
    echo "== round $round: kogpt2 (bench_model)"
    # a command's own status is checked before its output is filtered (sh has no pipefail)
    "$build/bench_model" --threads "$threads" --dtypes f32,f16 --dir "$dir" >"$out"
    grep -v '^shape' "$out" || true
    # bench_model has written $dir-f32 and $dir-f16 (random weights, Hugging Face layout)
    if [ "$round" = 1 ]; then
        for d in f32 f16; do
            PYTHONPATH="$llama/gguf-py" "$py" bench/gguf_from_hf.py "$dir-$d" "$dir-$d.gguf" "$d"
        done
    fi
    echo "== round $round: llama.cpp (llama-bench: pp20/pp512 prompt, tg128 decode; tok/s)"
    for d in f32 f16; do
        "$llama_bench" -m "$dir-$d.gguf" -p 20,512 -n 128 -t "$threads" -r 3 -o md >"$out"
        grep -E '(pp|tg)[0-9]' "$out" || cat "$out"
    done
    round=$((round + 1))
done
