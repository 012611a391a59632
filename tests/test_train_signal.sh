#!/bin/sh
# test_train_signal.sh — Ctrl-C or SIGTERM ends a run after the step under way, saved (issue 13):
# 1) SIGTERM mid-run: exit 0, one line naming the step saved, train_state.bin holds that
#    step (the last one logged, with --save-every far away), and --resume continues at the
#    next step; then SIGINT likewise on the resumed run.
# 2) a second signal ends the run at once (killed by it, no save): the checkpoint before it
#    stays whole and resumable. SIGINT then SIGTERM, sent back to back: two different
#    signals cannot merge into one pending signal as two of the same kind would.
# 3) with MPI (skipped without): SIGTERM to rank 1 alone stops both ranks after the same
#    step, and rank 0 saves it; SIGUSR1 to mpirun (which forwards it; SIGTERM to mpirun
#    kills the ranks a second later) does the same for all ranks. Both end with exit 0.
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
w=$(mktemp -d /tmp/test_train_signal.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$w"' EXIT
fail() { echo "FAIL: $1"; cat "$w/log"; exit 1; }
# wait_for PATTERN: until the log shows it (30 s at most). The log is emptied before each
# run in the background starts: its own redirection may come after the first look.
wait_for() {
  i=0
  while ! grep -q "$1" "$w/log" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 300 ] || fail "no '$1' in 30 s"
    sleep 0.1
  done
}
# finish: waits (30 s at most) for the trainer to exit; rc = its status
finish() {
  i=0
  while kill -0 $pid 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$pid/stat" 2>/dev/null)" != Z ]; do
    i=$((i + 1)); [ $i -lt 300 ] || fail "still running 30 s after the signal"
    sleep 0.1
  done
  rc=0; wait $pid || rc=$?; pid=
}
state_step() { od -An -t u8 -j 16 -N 8 "$1/train_state.bin" | tr -d ' '; }
last_step() { grep '^step' "$w/log" | tail -n 1 | cut -d' ' -f2 | cut -d/ -f1; }
# (not a shell function: a background function is a subshell, and kill must hit the trainer)
args="train --data $fx/data --tokenizer $fx/tok.model --n-layer 2 --n-embd 32 --n-head 2
  --n-ctx 32 --steps 100000 --batch 4 --seq 16 --val-every 0 --save-every 100000 --threads 1
  --out $w/ck"

# 1) SIGTERM, then SIGINT on the resumed run
resumed=0
for sig in TERM INT; do
  resume=
  [ $resumed = 0 ] || resume=--resume
  : > "$w/log"
  # shellcheck disable=SC2086 # one word per flag
  "$B/kogpt2-train" $args $resume > "$w/log" 2>&1 &
  pid=$!
  wait_for "^step $((resumed + 10))/"
  kill -$sig $pid
  finish
  n=$(last_step)
  [ $rc = 0 ] || fail "SIG$sig: exit $rc"
  grep -qx "interrupted: checkpoint step $n -> $w/ck (--resume continues from it)" "$w/log" ||
    fail "SIG$sig: no line saying step $n was saved"
  [ "$(state_step "$w/ck")" = "$n" ] || fail "SIG$sig: train_state.bin holds step $(state_step "$w/ck"), not $n"
  if [ $resumed != 0 ]; then
    grep -q "^resumed $w/ck at step $resumed\$" "$w/log" && grep -q "^step $((resumed + 1))/" "$w/log" ||
      fail "did not resume at step $resumed"
  fi
  echo "SIG$sig after step $n: exit 0, saved step $n${resume:+ (resumed at $resumed)}"
  resumed=$n
done
# shellcheck disable=SC2086
"$B/kogpt2-train" $args --resume --stop-at $((resumed + 1)) > "$w/log" 2>&1
grep -q "^resumed $w/ck at step $resumed\$" "$w/log" && grep -q "^step $((resumed + 1))/" "$w/log" ||
  fail "did not resume at step $resumed"
"$B/kogpt2" next --model "$w/ck" --tokens 5,6,7 --top-k 3 > /dev/null 2>&1 || fail "not served"

# 2) a second signal: steps of ~50 ms (a wider model) so that both land inside one step
slow="train --data $fx/data --tokenizer $fx/tok.model --n-layer 4 --n-embd 128 --n-head 4
  --n-ctx 64 --steps 100000 --batch 8 --seq 64 --val-every 0 --save-every 100000 --threads 1
  --out $w/slow"
# shellcheck disable=SC2086
"$B/kogpt2-train" $slow --stop-at 2 > "$w/log" 2>&1
sum=$(cksum "$w/slow"/* | sort)
: > "$w/log"
# shellcheck disable=SC2086
"$B/kogpt2-train" $slow --resume > "$w/log" 2>&1 &
pid=$!
wait_for '^step 4/'
kill -INT $pid
kill -TERM $pid
finish
[ $rc = 130 ] || [ $rc = 143 ] || fail "two signals: exit $rc, not killed by the second"
! grep -q '^interrupted' "$w/log" || fail "two signals: the run still saved"
[ "$(cksum "$w/slow"/* | sort)" = "$sum" ] && [ ! -e "$w/slow.tmp" ] || fail "the checkpoint changed"
# shellcheck disable=SC2086
"$B/kogpt2-train" $slow --resume --stop-at 3 > "$w/log" 2>&1
grep -q "^resumed $w/slow at step 2\$" "$w/log" || fail "no resume from step 2 after two signals"
echo "SIGINT + SIGTERM: exit $rc at once, the step-2 checkpoint intact and resumable"

# 3) data parallel: a signal to one rank stops both after the same step
if [ "${KG_MPI:-OFF}" = ON ] && command -v mpirun >/dev/null 2>&1; then
  root=
  [ "$(id -u)" = 0 ] && root=--allow-run-as-root
  for to in rank1 mpirun; do
    : > "$w/log"
    # shellcheck disable=SC2086
    ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
      mpirun -np 2 --oversubscribe $root "$B/kogpt2-train" $args --batch 2 --out "$w/mpi_$to" \
      > "$w/log" 2>&1 &
    pid=$!
    wait_for '^step 10/'
    if [ $to = mpirun ]; then
      kill -USR1 $pid
    else
      r1=
      for p in $(pgrep -P "$pid" kogpt2-train 2>/dev/null); do # mpirun's child that is rank 1
        tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && r1=$p
      done
      [ -n "$r1" ] || fail "rank 1's process not found under mpirun ($pid)"
      kill -TERM "$r1"
    fi
    finish
    n=$(last_step)
    [ $rc = 0 ] || fail "mpirun: exit $rc ($to signalled)"
    grep -q "^interrupted: checkpoint step $n -> $w/mpi_$to " "$w/log" &&
      [ "$(state_step "$w/mpi_$to")" = "$n" ] || fail "2 ranks: step $n not saved"
    echo "2 ranks, $([ $to = mpirun ] && echo 'SIGUSR1 to mpirun' || echo 'SIGTERM to rank 1') after step $n: both stopped, exit 0, step $n saved"
  done
fi
echo PASS
