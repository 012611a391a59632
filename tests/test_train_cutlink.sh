#!/bin/sh
# test_train_cutlink.sh — a host that drops off the network, and a rank that is killed, on
# three "hosts" (tests/netns_hosts.sh; one rank each, --batch 2, a checkpoint every 10 steps,
# --dist-timeout 5):
#   1. host 2's link goes down (ip link set down) past step 25: the ranks on hosts 0 and 1
#      stop within --dist-timeout + the roll call's grace + 20 s, each saying which step's
#      collective did not complete and that rank 2 (kg-h2) did not answer; mpirun ends, non-zero
#      (each host's TCP gives up on a dead peer after net.ipv4.tcp_retries2 = 4, ~6 s, set in
#      its namespace: Linux's default of 15 would keep mpirun waiting for kg-h2's daemon for
#      some 15 minutes after the ranks have stopped); the last checkpoint is whole (its step a
#      multiple of 10, resumable);
#   2. --resume continues on the 2 hosts left with --batch 1: --grad-accum 3 keeps the global
#      batch of 6 windows, so steps 21..30 are made of the same windows as in an uninterrupted
#      run. Compared with 1 rank x --batch 6 that never stopped: the 10 losses after the
#      checkpoint within 1e-4 (measured: 1e-6) and the weights then within 5e-4 (measured:
#      6.6e-5 after 50 steps: summation order only, which AdamW's division by sqrt(v) magnifies
#      where a gradient is near 0; a batch not kept moves the losses by ~1e-2);
#   3. rank 2 gets SIGKILL past step 25: the other ranks and mpirun are gone within 30 s,
#      non-zero, with a message naming rank 2 and its host; the last checkpoint is whole.
# Skips (77) as test_train_multihost.sh does.
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
src=${KG_SOURCE_DIR:?}
[ "${KG_MPI:-OFF}" = ON ] || { echo "SKIP: kogpt2-train was built without MPI (apt-get install libopenmpi-dev)"; exit 77; }
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not installed (openmpi-bin)"; exit 77; }
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
. "$src/tests/netns_hosts.sh"
nh_probe || { echo "SKIP: no network namespaces: $nh_why"; exit 77; }
w=$(mktemp -d /tmp/test_train_cutlink.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; nh_down; rm -rf "$w"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up after a signal too (ctest's timeout)
N=3
# the N hosts, each TCP giving up on a dead peer after ~6 s (the header)
hosts_up() {
  nh_up $N "$w"
  i=0
  while [ $i -lt $N ]; do ip netns exec "${nh_id}h$i" sysctl -qw net.ipv4.tcp_retries2=4; i=$((i + 1)); done
}
hosts_up
TIMEOUT=5
args="--data $fx/data --tokenizer $fx/tok.model --n-layer 2 --n-embd 32 --n-head 2 --n-ctx 32
  --steps 100000 --seq 16 --lr 3e-3 --val-every 0 --save-every 10 --threads 1 --device cpu"
fail() { echo "FAIL: $*"; [ -f "$w/log" ] && grep -v '^step' "$w/log" | tail -n 20; exit 1; }
# the step of the checkpoint in $1 (train_state.bin's first u64 after the 16-byte header)
ckpt_step() { od -An -t u8 -j 16 -N 8 "$1/train_state.bin" | tr -d ' '; }
# waits until the log shows step $1 (60 s at most)
wait_step() {
  i=0
  while ! grep -q "^step $1/" "$w/log" 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 600 ] && kill -0 $pid 2>/dev/null ||
      fail "no step $1 in 60 s (mpirun $(kill -0 $pid 2>/dev/null && echo running || echo ended);" \
        "last: $(grep '^step' "$w/log" 2>/dev/null | tail -n 1))"
    sleep 0.1
  done
}
# waits until no kogpt2-train runs in hosts 0..N-1 and mpirun has ended; $1: the bound in s
wait_gone() {
  i=0
  while :; do
    left=
    for h in 0 1 2; do
      for p in $(ip netns pids "${nh_id}h$h" 2>/dev/null); do
        grep -q kogpt2-train "/proc/$p/cmdline" 2>/dev/null && left="$left h$h:$p"
      done
    done
    [ -z "$left" ] && ! kill -0 $pid 2>/dev/null && break
    i=$((i + 1))
    [ $i -lt $(($1 * 10)) ] || fail "still running $1 s later:$left$(kill -0 $pid 2>/dev/null && echo ' mpirun')"
    sleep 0.1
  done
  rc=0
  wait $pid || rc=$?
  pid=
  [ $rc -ne 0 ] || fail "the run exited 0"
}

# --- 1. a link cut
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
  nh_mpirun -H "$(nh_hosts $N)" -np $N "$B/kogpt2-train" train $args --batch 2 \
  --dist-timeout $TIMEOUT --out "$w/ck" > "$w/log" 2>&1 &
pid=$!
wait_step 25
ip link set "${nh_id}v2" down
t0=$(date +%s)
cut=$(grep -c '^step' "$w/log")
wait_gone $((TIMEOUT + 5 + 20))
took=$(($(date +%s) - t0))
for r in 0 1; do
  grep -Eq "^kogpt2-train train \(rank $r of 3 on kg-h$r\): step [0-9]+: .* did not complete within $TIMEOUT s.*no answer from rank 2 \(kg-h2\)" "$w/log" ||
    fail "rank $r did not say which step and which rank failed"
done
grep '^kogpt2-train train (rank 0' "$w/log"
step=$(ckpt_step "$w/ck")
[ $((step % 10)) -eq 0 ] && [ "$step" -ge 20 ] && [ "$step" -le "$((cut + 1))" ] ||
  fail "the checkpoint holds step $step (cut after step $cut)"
echo "link of kg-h2 cut after step $cut: the run ended (non-zero) within $took s, checkpoint step $step"

# --- 2. resumed on the two hosts left, --batch 1: --grad-accum 3 keeps the 6-window batch
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
  nh_mpirun -H "$(nh_hosts 2)" -np 2 "$B/kogpt2-train" train --resume "$w/ck" --batch 1 \
  --stop-at $((step + 10)) --dist-timeout $TIMEOUT > "$w/log" 2>&1 || fail "the resumed run failed"
grep -q "^resuming on 2 ranks a checkpoint of 3: --grad-accum 3 keeps the global batch of 6 windows" "$w/log" ||
  fail "no --grad-accum 3 on 2 ranks"
mv "$w/log" "$w/resumed.log"
# shellcheck disable=SC2086
"$B/kogpt2-train" train $args --batch 6 --stop-at $((step + 10)) --out "$w/ref" > "$w/ref.log"
awk -v from="$step" '/^step/ { split($2, s, "/"); if (s[1] > from) print s[1], $4 }' "$w/resumed.log" > "$w/a"
awk -v from="$step" '/^step/ { split($2, s, "/"); if (s[1] > from) print s[1], $4 }' "$w/ref.log" > "$w/b"
[ "$(wc -l < "$w/a")" -eq 10 ] || fail "the resumed run logged $(wc -l < "$w/a") steps, not 10"
paste "$w/a" "$w/b" | awk '{ d = $2 - $4; if (d < 0) d = -d; if (d > m) m = d; if ($1 != $3) bad = 1 }
  END { printf "losses of steps %s..: max |resumed on 2 - uninterrupted| = %.2e (tolerance 1e-4)\n", from, m;
        exit (bad || m > 1e-4) }' from=$((step + 1)) || fail "the loss curve does not continue"
"$B/weights_cmp" "$w/ck" "$w/ref" 5e-4

# --- 3. SIGKILL of rank 2
rm -rf "$w/ck" "$w/ck".*
# on hosts made again: with kg-h2's link merely set up again, this run once did not reach a
# step in 60 s (the ASan build in CI; something the cut left in the hosts, an Open MPI daemon
# or a neighbour entry: which was not found)
nh_down
hosts_up
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
  nh_mpirun -H "$(nh_hosts $N)" -np $N "$B/kogpt2-train" train $args --batch 2 \
  --dist-timeout $TIMEOUT --out "$w/ck" > "$w/log" 2>&1 &
pid=$!
wait_step 25
r2=
for p in $(ip netns pids "${nh_id}h2"); do grep -q kogpt2-train "/proc/$p/cmdline" && r2=$p; done
[ -n "$r2" ] || fail "rank 2's process not found in kg-h2"
kill -9 "$r2"
t0=$(date +%s)
wait_gone 30
grep -Eqi "rank 2 .*(198\.18\.0\.3|kg-h2).*(signal 9|killed)|rank 2 \(kg-h2\)" "$w/log" ||
  fail "no message naming rank 2 and its host"
grep -Ei "rank 2" "$w/log" | head -n 2
step=$(ckpt_step "$w/ck")
[ $((step % 10)) -eq 0 ] && [ "$step" -ge 20 ] || fail "the checkpoint holds step $step"
echo "rank 2 killed: the run ended (non-zero) within $(($(date +%s) - t0)) s, checkpoint step $step"
echo PASS
