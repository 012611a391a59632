#!/bin/sh
# bench_vs_llama.sh — our CPU backend and llama.cpp on the same weights, in turns, in the same
# run: bench_model (prefill 20/64/512, decode 128) and llama-bench (pp20, pp512, tg128) on
# the KoGPT2-base shape (random weights) in f32, f16, bf16, q8_0 and q4_0, then one table per round
# of tok/s side by side with the load average at the round's start. Figures only, never
# pass/fail; the rounds show how much the machine drifted while they ran.
#
#   bench/bench_vs_llama.sh LLAMA_CPP [BUILD_DIR [THREADS [ROUNDS]]]
#
# LLAMA_CPP: a llama.cpp source tree with llama-bench and llama-quantize built in
# LLAMA_CPP/build/bin (CPU: cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON;
# cmake --build build --target llama-bench llama-quantize), or LLAMA_BENCH= and
# LLAMA_QUANTIZE= paths to them. Its gguf-py writes the GGUF files (bench/gguf_from_hf.py,
# python3-numpy). BUILD_DIR: build (relative to the repository root); THREADS: 2; ROUNDS: 2;
# KG_BENCH_DIR: where the models go (/tmp/kg-bench-*).
#
# What each side quantizes (q8_0, q4_0; the same ggml blocks on both sides):
# - kogpt2 (bench_model --dtypes q8_0,q4_0: the f32 checkpoint quantized at load): every
#   layer matrix and the LM head, a quantized copy of the tied embedding; the embedding
#   itself stays f32 for the lookups (one row per token), and so do the position embedding,
#   the biases and the layer norms.
# - llama.cpp (llama-quantize --pure from the f32 GGUF): every matrix, the token embedding
#   and output.weight (gguf_from_hf.py writes the tied head out as its own copy) included;
#   position_embd, the biases and the norms stay f32. --pure because by default
#   llama-quantize keeps output.weight in q6_K under q4_0 (more bytes per decode step than
#   ours); under q8_0 the default is the same as --pure.
# - bf16: ours is bench_model --dtypes bf16 --precision bf16 (a bf16 checkpoint, prompts'
#   matmuls on bf16 activations with vdpbf16ps where the CPU has AVX512-BF16); llama.cpp's is
#   llama-quantize --pure ... bf16, which rounds activations to bf16 too (vec_dot_bf16, its
#   bf16 sgemm).
# So a decode step reads the same weight bytes on both sides. Both decode 128 tokens after
# 64 (llama-bench -d 64), both prompts start from an empty cache. Other differences:
# llama.cpp keeps its KV cache in f16 (ours f32: at positions 64..191 a decode step reads
# ~9 MB of keys and values against its ~5) and repacks q4_0 at load for its AVX2/AVX-512
# kernels.
set -eu
llama=${1:?usage: bench/bench_vs_llama.sh LLAMA_CPP [BUILD_DIR [THREADS [ROUNDS]]]}
llama=$(cd "$llama" && pwd)
cd "$(dirname "$0")/.."
build=${2:-build}
threads=${3:-2}
rounds=${4:-2}
py=${KG_PYTHON:-/usr/bin/python3}
llama_bench=${LLAMA_BENCH:-$llama/build/bin/llama-bench}
llama_quantize=${LLAMA_QUANTIZE:-$llama/build/bin/llama-quantize}
[ -x "$llama_bench" ] || { echo "bench_vs_llama: no llama-bench at $llama_bench" >&2; exit 2; }
[ -x "$llama_quantize" ] || {
    echo "bench_vs_llama: no llama-quantize at $llama_quantize" >&2
    exit 2
}
[ -d "$llama/gguf-py" ] || { echo "bench_vs_llama: no $llama/gguf-py" >&2; exit 2; }
dir=${KG_BENCH_DIR:-/tmp/kg-bench} # the model directories and GGUF files
dtypes="f32 f16 bf16 q8_0 q4_0"
out=$(mktemp)
rows=$(mktemp) # round dtype test side tok/s
trap 'rm -f "$out" "$rows"' EXIT
echo "llama.cpp: $(git -C "$llama" rev-parse --short HEAD 2>/dev/null || echo "$llama")"
round=1
while [ "$round" -le "$rounds" ]; do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    echo "== round $round (load average $load): kogpt2 (bench_model)"
    # a command's own status is checked before its output is filtered (sh has no pipefail)
    "$build/bench_model" --threads "$threads" --dtypes f32,f16,q8_0,q4_0 --dir "$dir" >"$out"
    "$build/bench_model" --threads "$threads" --dtypes bf16 --precision bf16 --dir "$dir" >>"$out"
    grep -v '^shape' "$out" || true
    # "q8_0 threads=2  prefill20 29.0 ms ... prefill512 444.4 tok/s ... decode 98.9 tok/s"
    awk -v r="$round" '$2 ~ /^threads=/ {
        for (i = 3; i < NF; i++) {
            if ($i == "prefill20") print r, $1, "pp20", "kogpt2", 20000 / $(i + 1)
            if ($i == "prefill512") print r, $1, "pp512", "kogpt2", $(i + 1)
            if ($i == "decode") print r, $1, "tg128", "kogpt2", $(i + 1)
        }
    }' "$out" >>"$rows"
    # bench_model has written $dir-f32 and $dir-f16 (random weights, Hugging Face layout)
    if [ "$round" = 1 ]; then
        for d in f32 f16; do
            PYTHONPATH="$llama/gguf-py" "$py" bench/gguf_from_hf.py "$dir-$d" "$dir-$d.gguf" "$d"
        done
        for d in bf16 q8_0 q4_0; do
            "$llama_quantize" --pure "$dir-f32.gguf" "$dir-$d.gguf" "$d" "$threads" >"$out" 2>&1 ||
                { cat "$out"; exit 1; }
        done
    fi
    echo "== round $round: llama.cpp (llama-bench: pp20/pp512 prompt, tg128 decode after 64; tok/s)"
    for d in $dtypes; do
        for what in "-p 20,512 -n 0" "-p 0 -n 128 -d 64"; do
            # shellcheck disable=SC2086 # the options are separate words
            "$llama_bench" -m "$dir-$d.gguf" $what -t "$threads" -r 3 -o md >"$out"
            grep -E '(pp|tg)[0-9]' "$out" || cat "$out"
            # "| gpt2 0.1B Q8_0 | 169.21 MiB | 164.49 M | CPU | 2 | tg128 @ d64 | 168.14 ± 1.56 |"
            awk -F'|' -v r="$round" -v d="$d" 'NF > 3 && $(NF - 2) ~ /(pp|tg)[0-9]/ {
                t = $(NF - 2); gsub(/ /, "", t); sub(/@d[0-9]+/, "", t); split($(NF - 1), v, " ")
                print r, d, t, "llama", v[1]
            }' "$out" >>"$rows"
        done
    done
    echo "== round $round: tok/s (load average at its start: $load)"
    awk -v r="$round" -v dts="$dtypes" '$1 == r { v[$2 " " $3 " " $4] = $5 }
        END {
            printf "%-5s %-6s %10s %10s %7s\n", "dtype", "test", "kogpt2", "llama.cpp", "ratio"
            n = split(dts, d, " ")
            split("pp20 pp512 tg128", t, " ")
            for (i = 1; i <= n; i++)
                for (k = 1; k <= 3; k++) {
                    a = v[d[i] " " t[k] " kogpt2"]; b = v[d[i] " " t[k] " llama"]
                    printf "%-5s %-6s %10.1f %10.1f %7.2f\n", d[i], t[k], a, b, b ? a / b : 0
                }
        }' "$rows"
    round=$((round + 1))
done
