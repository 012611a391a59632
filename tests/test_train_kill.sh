#!/bin/sh
# test_train_kill.sh — a killed run leaves a loadable checkpoint and --resume continues.
# 1) SIGKILL right after the step-10 checkpoint: `kogpt2 next` serves it, and --resume
#    starts at the checkpointed step + 1.
# 2) SIGKILL at arbitrary moments of a run that checkpoints every step (so most kills land
#    inside a save): every time, --resume starts from a good checkpoint.
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
w=$(mktemp -d /tmp/test_train_kill.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$w"' EXIT
# (not a shell function: a background function is a subshell, and kill must hit the trainer)
args="train --data $fx/data --tokenizer $fx/tok.model --n-layer 2 --n-embd 32 --n-head 2
  --n-ctx 32 --steps 100000 --batch 4 --seq 16 --val-every 0 --threads 1 --out $w/ck"
# wait_for PATTERN: until the log shows it (30 s at most)
wait_for() {
  i=0
  while ! grep -q "$1" "$w/log" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 300 ] || { echo "FAIL: no '$1' in 30 s"; cat "$w/log"; exit 1; }
    sleep 0.1
  done
}
"$B/kogpt2-train" $args --save-every 10 > "$w/log" 2>&1 &
pid=$!
wait_for '^checkpoint step 10 '
kill -9 $pid; wait $pid 2>/dev/null || true; pid=
"$B/kogpt2" next --model "$w/ck" --tokens 5,6,7 --top-k 3
k=$(grep '^checkpoint step' "$w/log" | tail -n 1 | cut -d' ' -f3)
"$B/kogpt2-train" $args --save-every 10 --resume --stop-at $((k + 20)) > "$w/log2"
# the kill may land after a later save finished but before its log line: resumed >= k
r=$(grep "^resumed $w/ck at step" "$w/log2" | cut -d' ' -f5)
first=$(grep '^step' "$w/log2" | head -n 1 | cut -d' ' -f2)
[ -n "$r" ] && [ "$r" -ge "$k" ] && [ "$first" = "$((r + 1))/100000" ] ||
  { echo "FAIL: checkpoint $k, resumed at ${r:-?}, first step $first"; cat "$w/log2"; exit 1; }
echo "killed after checkpoint $k (log): served; resumed from $r at step $first"

for delay in 0.7 1.1 1.6; do
  "$B/kogpt2-train" $args --save-every 1 --resume > "$w/log" 2>&1 &
  pid=$!
  sleep $delay
  kill -9 $pid; wait $pid 2>/dev/null || true; pid=
  "$B/kogpt2-train" $args --save-every 1 --resume --stop-at 1 > "$w/log3" 2>&1 || true
  # --stop-at 1 is behind the checkpoint: the run only recovers and loads, then stops
  grep -q "^resumed $w/ck at step" "$w/log3" || { echo "FAIL: no resume after kill"; cat "$w/log3"; exit 1; }
  "$B/kogpt2" next --model "$w/ck" --tokens 5 --top-k 1 > /dev/null
  echo "kill after ${delay}s: $(grep '^resumed' "$w/log3")"
done
echo PASS
