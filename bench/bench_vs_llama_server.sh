#!/bin/sh
# bench_vs_llama_server.sh — kogpt2d and llama.cpp's llama-server serving the same weights under
# the same load (issue 34 item 7): one load generator (build/bench_clients) against both, at 1,
# 4, 16, 32 and 64 concurrent clients, in interleaved turns (kogpt2d, llama, kogpt2d, llama...)
# with both servers up, so that both see the same machine. Per point: generated tokens/s, time
# to first token and inter-token gaps (p50, p99) of streamed completions; next-token requests/s
# (kogpt2d /v1/next-token top_k 10, llama-server /completion n_predict 1 n_probs 10) with
# p50/p99 latency; each server's peak RSS during the point. Then a table of medians over the
# rounds and the ratios kogpt2d / llama. After each point bench_clients waits until the server
# is idle again (the requests cut at the point's end cancelled), so a point never runs beside
# the other side's leftovers. Figures only, never pass/fail.
#
#   bench/bench_vs_llama_server.sh LLAMA_CPP [BUILD_DIR [ROUNDS]]
#   bench/bench_vs_llama_server.sh --summary LOG      the table of a saved run's log again
#
# LLAMA_CPP: a llama.cpp source tree with llama-server and llama-quantize built in
# LLAMA_CPP/build/bin (CPU only: cmake -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON;
# cmake --build build -j2 --target llama-server llama-quantize), or LLAMA_SERVER= and
# LLAMA_QUANTIZE= paths to them; its gguf-py writes the GGUF files (bench/gguf_from_hf.py,
# python3-numpy). BUILD_DIR: build (kogpt2d and bench_clients built there); ROUNDS: 3.
# Env: KG_BENCH_MODELS "base default" (base: a random f32 model of KoGPT2-base's shape with the
# shared v2 tokenizer, written once; default: models/default), KG_BENCH_DTYPES "f32 q8_0",
# KG_BENCH_CLIENTS "1 4 16 32 64", KG_BENCH_SECONDS 20 (each generate point; next-token points
# take half), KG_BENCH_THREADS 2, KG_BENCH_LLAMA_THREADS (llama-server's -t and -tb; default
# KG_BENCH_THREADS), KG_BENCH_DIR /tmp/kg-bench-serve (the models and GGUF files), KG_SHARED_DIR
# (../shared).
#
# On a machine whose cores are oversubscribed (other processes runnable), llama-server with 2
# threads on 2 cores can collapse: its threads spin at a barrier after every op, waiting for a
# thread that is not running (bench/results/cpu-epyc-2026-12-01/llama_threads_probe.log: 1-4
# tok/s at 2 threads, 29-40 at 1). KG_BENCH_LLAMA_THREADS=1 shows its best there; on a quiet
# machine both sides take the same count.
#
# The same work on both sides: prompts of 32 random token ids (a new prompt for each request,
# so no prefix is shared; the same ids for both servers), 128 generated tokens per request
# (ignore_eos), temperature 1, top_k 40, top_p 0.95, min_p 0. Weights: f32 as stored; q8_0 is
# kogpt2d --dtype q8_0 (every layer matrix and the LM head quantized at load) and
# llama-quantize --pure (every matrix; its token embedding and output copy too); see
# bench_vs_llama.sh for the details. Each side as an operator would run it for 64 clients:
# kogpt2d with its defaults (--max-batch 8, its own KV cache growth) and --max-queue 256;
# llama-server with 64 slots of 256 positions (-np 64 -c 16384, an f16 KV cache allocated at
# start) and continuous batching (its default). Both with KG_BENCH_THREADS threads.
set -eu
# summary FILE: the bench_clients lines in FILE as medians over the rounds, kogpt2d beside
# llama-server, and their ratio (generate points first, then next-token).
summary() {
    echo "== medians over the rounds (k: kogpt2d, l: llama-server; k/l: their ratio; latencies in ms, RSS in MiB)"
    grep ' api=' "$1" | awk '
function val(line, key,    i, n, kv) {
    n = split(line, kv, " ")
    for (i = 1; i <= n; i++) if (index(kv[i], key "=") == 1) return substr(kv[i], length(key) + 2)
    return ""
}
function median(list,    a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
    k = val($0, "model") " " val($0, "dtype") " " val($0, "mode") " " val($0, "clients")
    side = val($0, "api")
    if (!(k in seen)) { seen[k] = 1; order[++n] = k }
    split(val($0, "mode") == "generate" ? "tok_s ttft_p50_ms ttft_p99_ms itl_p50_ms itl_p99_ms rss_peak_mib errors" : "req_s lat_p50_ms lat_p99_ms rss_peak_mib errors", f, " ")
    for (i in f) v[k, side, f[i]] = v[k, side, f[i]] " " val($0, f[i])
}
END {
    for (pass = 1; pass <= 2; pass++) {
        want = pass == 1 ? "generate" : "next-token"
        if (pass == 1) printf "%-7s %-5s %4s | %8s %8s %5s | %8s %8s %8s %8s | %7s %7s %7s %7s | %6s %6s | %s\n", "model", "dtype", "cl", "tok/s k", "tok/s l", "k/l", "ttft50 k", "ttft50 l", "ttft99 k", "ttft99 l", "itl50 k", "itl50 l", "itl99 k", "itl99 l", "rss k", "rss l", "errors k/l"
        else printf "\n%-7s %-5s %4s | %8s %8s %5s | %8s %8s %8s %8s | %6s %6s | %s\n", "model", "dtype", "cl", "req/s k", "req/s l", "k/l", "p50 k", "p50 l", "p99 k", "p99 l", "rss k", "rss l", "errors k/l"
        for (i = 1; i <= n; i++) {
            k = order[i]
            split(k, p, " ")
            if (p[3] != want) continue
            if (pass == 1) {
                a = median(v[k, "kogpt2", "tok_s"]); b = median(v[k, "llama", "tok_s"])
                printf "%-7s %-5s %4s | %8.1f %8.1f %5.2f | %8.1f %8.1f %8.1f %8.1f | %7.2f %7.2f %7.2f %7.2f | %6.0f %6.0f | %s/%s\n", p[1], p[2], p[4], a, b, b ? a / b : 0,
                    median(v[k, "kogpt2", "ttft_p50_ms"]), median(v[k, "llama", "ttft_p50_ms"]),
                    median(v[k, "kogpt2", "ttft_p99_ms"]), median(v[k, "llama", "ttft_p99_ms"]),
                    median(v[k, "kogpt2", "itl_p50_ms"]), median(v[k, "llama", "itl_p50_ms"]),
                    median(v[k, "kogpt2", "itl_p99_ms"]), median(v[k, "llama", "itl_p99_ms"]),
                    median(v[k, "kogpt2", "rss_peak_mib"]), median(v[k, "llama", "rss_peak_mib"]),
                    median(v[k, "kogpt2", "errors"]), median(v[k, "llama", "errors"])
            } else {
                a = median(v[k, "kogpt2", "req_s"]); b = median(v[k, "llama", "req_s"])
                printf "%-7s %-5s %4s | %8.1f %8.1f %5.2f | %8.2f %8.2f %8.2f %8.2f | %6.0f %6.0f | %s/%s\n", p[1], p[2], p[4], a, b, b ? a / b : 0,
                    median(v[k, "kogpt2", "lat_p50_ms"]), median(v[k, "llama", "lat_p50_ms"]),
                    median(v[k, "kogpt2", "lat_p99_ms"]), median(v[k, "llama", "lat_p99_ms"]),
                    median(v[k, "kogpt2", "rss_peak_mib"]), median(v[k, "llama", "rss_peak_mib"]),
                    median(v[k, "kogpt2", "errors"]), median(v[k, "llama", "errors"])
            }
        }
    }
}'
}

if [ "${1:-}" = --summary ]; then # a saved log's table again
    summary "${2:?usage: bench/bench_vs_llama_server.sh --summary LOG}"
    exit 0
fi
llama=${1:?usage: bench/bench_vs_llama_server.sh LLAMA_CPP [BUILD_DIR [ROUNDS]]}
llama=$(cd "$llama" && pwd)
cd "$(dirname "$0")/.."
build=${2:-build}
rounds=${3:-3}
py=${KG_PYTHON:-/usr/bin/python3}
llama_server=${LLAMA_SERVER:-$llama/build/bin/llama-server}
llama_quantize=${LLAMA_QUANTIZE:-$llama/build/bin/llama-quantize}
models=${KG_BENCH_MODELS:-base default}
dtypes=${KG_BENCH_DTYPES:-f32 q8_0}
clients=${KG_BENCH_CLIENTS:-1 4 16 32 64}
seconds=${KG_BENCH_SECONDS:-20}
threads=${KG_BENCH_THREADS:-2}
llama_threads=${KG_BENCH_LLAMA_THREADS:-$threads}
dir=${KG_BENCH_DIR:-/tmp/kg-bench-serve}
for f in "$llama_server" "$llama_quantize" "$build/kogpt2d" "$build/bench_clients"; do
    [ -x "$f" ] || { echo "bench_vs_llama_server: no $f" >&2; exit 2; }
done
[ -d "$llama/gguf-py" ] || { echo "bench_vs_llama_server: no $llama/gguf-py" >&2; exit 2; }
mkdir -p "$dir"
rows=$(mktemp)
kpid=
lpid=
stop() {
    for p in $kpid $lpid; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    kpid=
    lpid=
}
trap 'stop; rm -f "$rows"' EXIT INT TERM

free_port() {
    "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# wait_ready PORT PATH PID: until GET PATH answers 200 (up to 120 s)
wait_ready() {
    i=0
    while [ $i -lt 1200 ]; do
        kill -0 "$3" 2>/dev/null || { echo "bench_vs_llama_server: a server exited (port $1)" >&2; exit 1; }
        if "$py" -c 'import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
c.request("GET", sys.argv[2]); sys.exit(c.getresponse().status != 200)' "$1" "$2" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
        i=$((i + 1))
    done
    echo "bench_vs_llama_server: port $1 never ready" >&2
    exit 1
}
rss() { awk '/^VmRSS:/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

echo "llama.cpp: $(git -C "$llama" log -1 --format='%h %cs' 2>/dev/null || echo "$llama")"
echo "kogpt2: $(git log -1 --format='%h %cs' 2>/dev/null || echo unknown)"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "settings: rounds $rounds, clients $clients, generate ${seconds} s and next-token $((seconds / 2)) s per point, kogpt2d $threads threads, llama-server $llama_threads"
for m in $models; do
    case $m in
        base)
            mdir=$dir/base
            [ -f "$mdir/model.safetensors" ] || "$build/bench_clients" --write-model "$mdir" --shape base
            ;;
        default) mdir=$PWD/models/default ;;
        *) echo "bench_vs_llama_server: no model '$m' (base, default)" >&2; exit 2 ;;
    esac
    vocab=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$mdir/config.json")
    [ -f "$dir/$m-f32.gguf" ] ||
        PYTHONPATH="$llama/gguf-py" "$py" bench/gguf_from_hf.py "$mdir" "$dir/$m-f32.gguf" f32
    for d in $dtypes; do
        [ "$d" = f32 ] || [ -f "$dir/$m-$d.gguf" ] ||
            "$llama_quantize" --pure "$dir/$m-f32.gguf" "$dir/$m-$d.gguf" "$d" "$threads" \
                >"$dir/quantize.log" 2>&1 || { cat "$dir/quantize.log"; exit 1; }
        kport=$(free_port)
        "$build/kogpt2d" --model "$mdir" --host 127.0.0.1 --port "$kport" --device cpu \
            --threads "$threads" --dtype "$d" --max-queue 256 --quiet >"$dir/kogpt2d.log" 2>&1 &
        kpid=$!
        lport=$(free_port)
        "$llama_server" -m "$dir/$m-$d.gguf" --host 127.0.0.1 --port "$lport" -t "$llama_threads" \
            -tb "$llama_threads" -np 64 -c 16384 -ngl 0 >"$dir/llama-server.log" 2>&1 &
        lpid=$!
        wait_ready "$kport" /readyz "$kpid"
        wait_ready "$lport" /health "$lpid"
        echo "== $m $d: idle RSS kogpt2d $(rss "$kpid") MiB, llama-server $(rss "$lpid") MiB"
        r=1
        while [ "$r" -le "$rounds" ]; do
            echo "== $m $d round $r (load average $(cut -d' ' -f1-3 /proc/loadavg))"
            for c in $clients; do
                for mode in generate next-token; do
                    s=$seconds
                    [ "$mode" = generate ] || s=$((seconds / 2))
                    for side in kogpt2 llama; do
                        if [ "$side" = kogpt2 ]; then port=$kport pid=$kpid; else port=$lport pid=$lpid; fi
                        line=$("$build/bench_clients" --port "$port" --api "$side" --mode "$mode" \
                            --clients "$c" --seconds "$s" --vocab "$vocab" --pid "$pid" \
                            --label "model=$m dtype=$d round=$r")
                        echo "$line"
                        echo "$line" >>"$rows"
                    done
                done
            done
            r=$((r + 1))
        done
        stop
    done
done

summary "$rows"
