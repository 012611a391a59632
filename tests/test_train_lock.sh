#!/bin/sh
# test_train_lock.sh — one process at a time writes a checkpoint directory (issue 24): while a
# run trains into CKPT_DIR, a second `train` on it (any spelling: DIR, ./DIR/, with --resume
# --force, 2 ranks under mpirun) and an `export --out` to it exit 1 at once, naming the
# holder's pid, and touch nothing; the first run goes on, stops on SIGUSR1 with exit 0, and
# its checkpoint is intact (it resumes). Without the lock the second run took the first one's DIR.tmp / DIR.old and
# one of them died at a save ("rename ck.tmp: No such file or directory"). The lock goes with
# the process, kill -9 included, and its file DIR.lock with a clean exit.
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
w=$(mktemp -d /tmp/test_train_lock.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$w"' EXIT
# (not a shell function: a background function is a subshell, and kill must hit the trainer)
args="--data $fx/data --tokenizer $fx/tok.model --n-layer 1 --n-embd 16 --n-head 2 --n-ctx 16
  --batch 2 --seq 8 --val-every 0 --threads 1 --steps 100000 --save-every 2"
# wait_for PATTERN: until the log shows it (30 s at most)
wait_for() {
  i=0
  while ! grep -q "$1" "$w/a.log" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 300 ] || { echo "FAIL: no '$1' in 30 s"; cat "$w/a.log"; exit 1; }
    sleep 0.1
  done
}
state_step() { od -An -t u8 -j 16 -N 8 "$1/train_state.bin" | tr -d ' '; }
# refused WANT COMMAND...: exit 1 at once, one line holding WANT (a run that is not refused
# would train for 100000 steps: 124 after 20 s)
refused() {
  want=$1; shift
  rc=0; timeout 20 "$@" > "$w/r.log" 2>&1 || rc=$?
  if [ $rc != 1 ] || ! grep -qF -- "$want" "$w/r.log" || [ "$(wc -l < "$w/r.log")" != 1 ]; then
    echo "FAIL: $* gave $rc, not a refusal saying '$want'"; cat "$w/r.log"; exit 1
  fi
  echo "refused: $(cat "$w/r.log")"
}

# shellcheck disable=SC2086 # one word per flag
"$B/kogpt2-train" train $args --out "$w/ck" > "$w/a.log" 2>&1 &
pid=$!
wait_for '^checkpoint step 2 '
# shellcheck disable=SC2086
refused "is in use by kogpt2-train pid $pid" "$B/kogpt2-train" train $args --out "$w/ck" --resume
# shellcheck disable=SC2086
refused "is in use by kogpt2-train pid $pid" "$B/kogpt2-train" train $args --out "$w/./ck/" \
  --resume --force
refused "is in use by kogpt2-train pid $pid" "$B/kogpt2-train" export --from "$w/ck" --out "$w/ck"
# under mpirun rank 0 takes the lock, and its refusal ends every rank (no hang, no step)
if [ "${KG_MPI:-OFF}" = ON ] && command -v mpirun >/dev/null 2>&1; then
  root=
  [ "$(id -u)" = 0 ] && root=--allow-run-as-root
  rc=0
  # shellcheck disable=SC2086
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" timeout 60 mpirun -np 2 --oversubscribe $root \
    "$B/kogpt2-train" train $args --out "$w/ck" --resume > "$w/m.log" 2>&1 || rc=$?
  if [ $rc = 0 ] || [ $rc = 124 ] || ! grep -qF "is in use by kogpt2-train pid $pid" "$w/m.log" ||
     grep -q '^step ' "$w/m.log"; then
    echo "FAIL: mpirun -np 2 on a locked --out gave $rc"; cat "$w/m.log"; exit 1
  fi
  echo "mpirun -np 2: exit $rc, refused by rank 0"
fi
# the first run went on through all this: it saves again, then stops on request, intact
k=$(grep -c '^checkpoint step' "$w/a.log")
wait_for "^checkpoint step $((2 * k + 4)) "
kill -USR1 $pid
rc=0; wait $pid || rc=$?; pid=
last=$(grep '^interrupted: checkpoint step' "$w/a.log" | cut -d' ' -f4)
[ $rc = 0 ] && [ -n "$last" ] && [ "$(state_step "$w/ck")" = "$last" ] ||
  { echo "FAIL: the first run exited $rc, checkpoint ${last:-?}"; cat "$w/a.log"; exit 1; }
! grep -q 'rename\|error' "$w/a.log" || { echo "FAIL: the first run logged an error"; cat "$w/a.log"; exit 1; }
[ ! -e "$w/ck.lock" ] && [ ! -e "$w/ck.tmp" ] && [ ! -e "$w/ck.old" ] ||
  { echo "FAIL: left behind: $(ls "$w")"; exit 1; }
echo "first run: exit 0, checkpoint step $last intact"

# released by kill -9 as well: the next run takes the lock and resumes the checkpoint
# shellcheck disable=SC2086
"$B/kogpt2-train" train $args --out "$w/ck" --resume > "$w/a.log" 2>&1 &
pid=$!
wait_for '^step '
kill -9 $pid; wait $pid 2>/dev/null || true; pid=
# (--stop-at 1 is behind the checkpoint: the run takes the lock, recovers, loads and stops)
# shellcheck disable=SC2086
"$B/kogpt2-train" train $args --out "$w/ck" --resume --stop-at 1 > "$w/b.log"
grep -q "^resumed $w/ck at step" "$w/b.log" && [ ! -e "$w/ck.lock" ] ||
  { echo "FAIL: no resume after kill -9"; cat "$w/b.log"; exit 1; }
echo "after kill -9: $(grep '^resumed' "$w/b.log")"
echo PASS
