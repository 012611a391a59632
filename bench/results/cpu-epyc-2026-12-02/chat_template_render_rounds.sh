#!/usr/bin/env bash
# chat_template_render_rounds.sh OLD_SRC NEW_SRC: the chat-template render time of two source
# trees (main and a branch), in ROUNDS (41) interleaved rounds (which side goes first
# alternates), 3 templates x RENDERS (5,000) renders of 64 messages; one line per round and
# template.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
for side in old new; do
  src=$([ $side = old ] && echo "$1" || echo "$2")
  gcc -O2 -DNDEBUG -std=gnu11 -DKG_VERSION=\"bench\" -DKG_COMMIT=\"bench\" -I"$src" "$here/chat_template_render_bench.c" \
    "$src"/server/chat_template/chat_template*.c "$src"/base/kg.c "$src"/base/buf.c -o "$tmp/bench_$side" -lm
done
rounds=${ROUNDS:-41} renders=${RENDERS:-5000}
for round in $(seq 1 "$rounds"); do
  for w in 0 1 2; do
    if [ $((round % 2)) -eq 0 ]; then
      o=$("$tmp/bench_old" $w "$renders"); n=$("$tmp/bench_new" $w "$renders")
    else
      n=$("$tmp/bench_new" $w "$renders"); o=$("$tmp/bench_old" $w "$renders")
    fi
    echo "round $round template $w old_ns $o new_ns $n"
  done
done
rm -rf "$tmp"
