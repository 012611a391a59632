#!/usr/bin/env bash
# bench_rounds.sh — the same benchmark against two kogpt2d builds in interleaved rounds (A, B,
# A, B, ...), so that load from elsewhere on a shared machine falls on both alike; prints every
# result line with its build and round, for medians and ratios across rounds.
#   bench/bench_rounds.sh ROUNDS OLD_KOGPT2D NEW_KOGPT2D BENCH [BENCH ARGS...] [-- KOGPT2D FLAGS]
# BENCH is build/bench_serving (it takes --kogpt2d and --label). Example, three rounds of the
# streams scenario against main's daemon built in build-main/:
#   bench/bench_rounds.sh 3 build-main/kogpt2d build/kogpt2d build/bench_serving \
#       --scenario streams --seconds 20
set -euo pipefail
[ $# -ge 4 ] || { sed -n 2,9p "$0"; exit 2; }
rounds=$1 old=$2 new=$3 bench=$4
shift 4
for r in $(seq 1 "$rounds"); do
    for build in old new; do
        exe=$old
        [ $build = new ] && exe=$new
        echo "== round $r: $build ($exe)"
        "$bench" --kogpt2d "$exe" --label "build=$build round=$r" "$@"
    done
done
