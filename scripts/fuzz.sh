#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) in build-fuzz and
# runs each on a copy of its seed corpus; the repo's corpus is never written to.
#   scripts/fuzz.sh              60 s per target (CI)
#   scripts/fuzz.sh 600          a longer campaign: 600 s per target
#   scripts/fuzz.sh runs=1000000 a fixed number of executions per target
#   scripts/fuzz.sh replay       only the seed corpus and the regression inputs, once each
#   any of them + target names   only those, e.g. scripts/fuzz.sh 300 fuzz_http
# Environment: FUZZ_KEEP=1 resumes from the corpus the last run grew (build-fuzz/corpus)
# instead of starting again from the seeds; FUZZ_NICE (10) is the fuzzers' niceness; FUZZ_JOBS
# (default: the core count) how many targets fuzz at once, each a process on a core of its own.
# Prints executions per target and in total. Exits non-zero on any crash, leak, timeout or
# failed check; the input that did it is left in build-fuzz/crashes/. A target whose data
# file is missing (../shared) says so and counts as skipped. A crash found here becomes a
# regression input: copy it to tests/fuzz/regress/<target>/ once it is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_safetensors fuzz_pytorch fuzz_config fuzz_tok_spm fuzz_tok_bpe fuzz_http fuzz_chat_template)
case "$mode" in
replay) limit=(-runs=0) ;;
runs=[0-9]*) limit=("-${mode}") ;;
[0-9]*) limit=("-max_total_time=$mode") ;;
*) echo "usage: scripts/fuzz.sh [SECONDS | runs=N | replay] [TARGET...]" >&2; exit 2 ;;
esac

if ! command -v clang >/dev/null || ! command -v clang++ >/dev/null; then
    echo "fuzz: clang and clang++ are needed (apt-get install clang libclang-rt-dev)" >&2
    exit 1
fi

echo "== build-fuzz (clang, libFuzzer, ASan + UBSan)"
# -O2 -g without -DNDEBUG: the code's own asserts stay on while fuzzing
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g" \
    -DKG_FUZZ=ON -DKG_CUDA=OFF -DKG_MPI=OFF -DKG_CPU_SIMD=OFF -DKG_WERROR=ON \
    -DKG_SANITIZE=address,undefined \
    >/dev/null
cmake --build build-fuzz -j "${FUZZ_BUILD_JOBS:-2}" --target "${targets[@]}"

mkdir -p build-fuzz/crashes build-fuzz/logs build-fuzz/corpus
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# One target: fuzz it, then write its line (and its execution count) to build-fuzz/logs/$1.result.
fuzz_one() {
    local t=$1 seeds=tests/fuzz/corpus/$1 regress=tests/fuzz/regress/$1 dict=tests/fuzz/$1.dict
    [ -f "$dict" ] || dict=tests/fuzz/${t%_*}.dict # fuzz_tok_spm, fuzz_tok_bpe: fuzz_tok.dict
    local inputs=() work=build-fuzz/corpus/$t # the copy the fuzzer grows
    if [ "$mode" = replay ]; then
        inputs=("$seeds")
    else
        if [ "${FUZZ_KEEP:-0}" != 1 ] || [ ! -d "$work" ]; then
            rm -rf "$work"
            mkdir -p "$work"
            cp "$seeds"/* "$work"/
        fi
        inputs=("$work" "$seeds")
    fi
    [ -d "$regress" ] && inputs+=("$regress")
    # exit codes of our own: libFuzzer's default 77 would read as "skipped"
    local opts=("${limit[@]}" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 -error_exitcode=1
        -timeout_exitcode=2
        "-artifact_prefix=build-fuzz/crashes/$t-")
    [ "$mode" != replay ] && [ -f "$dict" ] && opts+=("-dict=$dict")
    local log=build-fuzz/logs/$t.log res=build-fuzz/logs/$t.result rc=0 execs
    echo "== $t ${opts[*]:0:1}"
    nice -n "${FUZZ_NICE:-10}" "build-fuzz/$t" "${opts[@]}" "${inputs[@]}" >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    execs=${execs:-0}
    if [ "$rc" = 77 ]; then
        echo "skipped 0 $t: skipped ($(grep -m1 'skipped' "$log" || true))" >"$res"
    elif [ "$rc" != 0 ]; then
        { echo "failed $execs $t: FAILED (exit $rc) after $execs executions; log: $log"
          grep -m1 -E 'ERROR|check failed|runtime error' "$log" || true
          grep -E 'Test unit written to|artifact_prefix' "$log" || true; } >"$res"
    else
        echo "ok $execs $t: $execs executions, no crash" >"$res"
    fi
}

# FUZZ_JOBS targets at a time (default: one per core): each fuzzer is one process on one
# core, so on 2 cores two at a time give every target its time on a core of its own in half
# the wall time.
jobs=${FUZZ_JOBS:-$(nproc)}
running=0
for t in "${targets[@]}"; do
    rm -f "build-fuzz/logs/$t.result"
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
wait
total=0
failed=()
for t in "${targets[@]}"; do
    res=build-fuzz/logs/$t.result
    [ -f "$res" ] || { echo "$t: FAILED (no result)"; failed+=("$t"); continue; }
    read -r state execs _ <"$res"
    sed '1s/^[a-z]* [0-9]* //' "$res"
    total=$((total + execs))
    [ "$state" = failed ] && failed+=("$t")
done
echo "fuzz: $total executions in total"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (inputs in build-fuzz/crashes/)"
    exit 1
fi
