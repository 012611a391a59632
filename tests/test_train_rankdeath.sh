#!/bin/sh
# test_train_rankdeath.sh — a rank that dies makes the others exit with a clear error: a
# 2-rank `mpirun` run is past a few steps, rank 1 gets SIGKILL, and within 60 s the run
# (mpirun and rank 0) must be gone with a non-zero status and a message naming the dead
# rank. Skips (77) without an MPI build or mpirun, like test_train_mpi.sh.
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
[ "${KG_MPI:-OFF}" = ON ] || { echo "SKIP: kogpt2-train was built without MPI (apt-get install libopenmpi-dev)"; exit 77; }
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not installed (openmpi-bin)"; exit 77; }
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
w=$(mktemp -d /tmp/test_train_rankdeath.XXXXXX)
pid=
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; rm -rf "$w"' EXIT
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
# rank_pid R: the pid of mpirun's child process that is rank R (from its environment)
rank_pid() {
  for p in $(pgrep -P "$pid" kogpt2-train 2>/dev/null); do
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$p"; return 0
    fi
  done
  return 1
}
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
  mpirun -np 2 --oversubscribe $root "$B/kogpt2-train" train --data "$fx/data" \
  --tokenizer "$fx/tok.model" --n-layer 2 --n-embd 32 --n-head 2 --n-ctx 32 --steps 100000 \
  --batch 2 --seq 16 --val-every 0 --threads 1 --out "$w/ck" > "$w/log" 2>&1 &
pid=$!
i=0 # mid-run: rank 0 has logged step 5 (60 s at most)
while ! grep -q '^step 5/' "$w/log" 2>/dev/null; do
  i=$((i + 1))
  [ $i -lt 600 ] && kill -0 $pid 2>/dev/null || { echo "FAIL: no step 5 in 60 s"; cat "$w/log"; exit 1; }
  sleep 0.1
done
r1=$(rank_pid 1) || { echo "FAIL: rank 1's process not found under mpirun ($pid)"; exit 1; }
r0=$(rank_pid 0) || r0=
kill -9 "$r1"
t0=$(date +%s)
rc=0
i=0 # the whole run must end within 60 s
while kill -0 $pid 2>/dev/null; do
  i=$((i + 1))
  [ $i -lt 600 ] || { echo "FAIL: mpirun still running 60 s after rank 1 died"; cat "$w/log"; exit 1; }
  sleep 0.1
done
wait $pid || rc=$?
pid=
echo "--- the run's output (tail)"
tail -n 15 "$w/log"
echo "---"
[ "$rc" -ne 0 ] || { echo "FAIL: the run exited 0 after rank 1 was killed"; exit 1; }
# rank 0 is gone too (mpirun kills it; a zombie awaiting its reaper counts as gone)
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null && [ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]; }
while alive "$r0"; do
  i=$((i + 1))
  [ $i -lt 600 ] || { echo "FAIL: rank 0 ($r0) still alive 60 s after rank 1 died"; exit 1; }
  sleep 0.1
done
# the message: the dead rank and how it died (mpirun's), or ours from dist_mpi.c
grep -Eqi 'rank 1.*(signal 9|killed)|(signal 9|killed).*rank 1|kogpt2-train: .*rank' "$w/log" ||
  { echo "FAIL: no clear message naming the dead rank"; exit 1; }
echo "rank 1 killed: the run exited with status $rc, rank 0 gone, after $(($(date +%s) - t0)) s"
echo PASS
