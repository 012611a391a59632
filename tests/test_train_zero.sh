#!/bin/sh
# test_train_zero.sh — ZeRO-1 and the gradient wire on one machine (mpirun -np 2; across
# hosts: test_train_multihost.sh). Every comparison is of weights after 4 steps of lr 3e-3
# against a run without the feature (tests/tools/weights_cmp.c):
#   1. --zero 1 on 2 ranks = plain data parallelism on 2 ranks, within 1e-5 (the same sums,
#      reduce-scattered then all-gathered; test_train_mpi.sh's tolerance), and each rank holds
#      half the AdamW moments (the log's "ZeRO-1: AdamW moments X MiB on each rank (of Y)":
#      X = Y / 2 to the 0.01 MiB the line prints);
#      With --bucket-mb 0.01 (2621 floats: each layer's gradients split over several
#      all-reduces) plain data parallelism gives the same weights too, within 1e-5;
#   2. a checkpoint written at 2 ranks under ZeRO-1 (stopped after step 2) resumes at 1 rank,
#      and one written at 1 rank resumes at 2 ranks under ZeRO-1 (--grad-accum keeps the
#      batch), each ending within 1e-5 of 1 rank x --batch 4 that never stopped (the saved
#      moments are all of them, gathered on rank 0, and each rank reads its shard back);
#   3. --wire bf16 and --wire f16 (gradients rounded to 16 bits on the wire): the losses of
#      the 4 steps within 1e-3 of f32 on the wire (measured: bf16 9.3e-5, f16 9e-6) and the
#      weights within 1e-2 (measured: 3.0e-3 for both, one lr: AdamW's update is ~lr whatever the
#      gradient's size, so a weight whose tiny gradient rounds to the other side moves by up
#      to 2 lr), and not within 1e-7 (the rounding did happen).
# Skips (77) without an MPI build or mpirun, like test_train_mpi.sh.
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
[ "${KG_MPI:-OFF}" = ON ] || { echo "SKIP: kogpt2-train was built without MPI (apt-get install libopenmpi-dev)"; exit 77; }
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not installed (openmpi-bin)"; exit 77; }
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
w=$(mktemp -d /tmp/test_train_zero.XXXXXX)
trap 'rm -rf "$w"' EXIT
root=
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
run() {
  "$@" --data "$fx/data" --tokenizer "$fx/tok.model" --n-layer 2 --n-embd 32 --n-head 2 \
    --n-ctx 32 --steps 4 --seq 16 --lr 3e-3 --val-every 0 --threads 1 --device cpu
}
# OpenMPI keeps allocations past MPI_Finalize: no leak check in the ranks (test_train_mpi.sh)
mpi2() { ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" mpirun -np 2 --oversubscribe $root "$@"; }
losses() { awk '/^step/ { printf "%s ", $4 }' "$1"; }

run "$B/kogpt2-train" train --batch 4 --out "$w/one" > "$w/one.log"
run mpi2 "$B/kogpt2-train" train --batch 2 --out "$w/dp" > "$w/dp.log"
run mpi2 "$B/kogpt2-train" train --batch 2 --zero 1 --out "$w/zero" > "$w/zero.log"
echo "1 rank:           $(losses "$w/one.log")"
echo "2 ranks:          $(losses "$w/dp.log")"
echo "2 ranks, ZeRO-1:  $(losses "$w/zero.log")"
"$B/weights_cmp" "$w/zero" "$w/dp" 1e-5
line=$(grep '^ZeRO-1: AdamW moments' "$w/zero.log") || { echo "FAIL: no ZeRO-1 line"; cat "$w/zero.log"; exit 1; }
echo "$line"
run mpi2 "$B/kogpt2-train" train --batch 2 --bucket-mb 0.01 --out "$w/small" > "$w/small.log"
echo "2 ranks, 10 KiB buckets: $(losses "$w/small.log")"
"$B/weights_cmp" "$w/small" "$w/dp" 1e-5
echo "$line" | awk '{ x = $4; y = $10; if (x < y / 2 - 0.01 || x > y / 2 + 0.01) exit 1 }' ||
  { echo "FAIL: each rank should hold half of the moments"; exit 1; }

# checkpoints across world sizes: 2 ranks (ZeRO-1) -> 1 rank, and 1 rank -> 2 ranks (ZeRO-1)
run mpi2 "$B/kogpt2-train" train --batch 2 --zero 1 --stop-at 2 --out "$w/z21" > /dev/null
run "$B/kogpt2-train" train --resume "$w/z21" --batch 4 > "$w/z21.log"
grep -q "resuming on 1 ranks a checkpoint of 2: --grad-accum 1" "$w/z21.log" ||
  { echo "FAIL: 2 -> 1 did not keep the batch"; cat "$w/z21.log"; exit 1; }
echo "2 -> 1:           $(losses "$w/z21.log")"
"$B/weights_cmp" "$w/z21" "$w/one" 1e-5
run "$B/kogpt2-train" train --batch 4 --stop-at 2 --out "$w/z12" > /dev/null
run mpi2 "$B/kogpt2-train" train --resume "$w/z12" --batch 2 --zero 1 > "$w/z12.log"
grep -q "resuming on 2 ranks a checkpoint of 1: --grad-accum 1" "$w/z12.log" ||
  { echo "FAIL: 1 -> 2 did not keep the batch"; cat "$w/z12.log"; exit 1; }
echo "1 -> 2 (ZeRO-1):  $(losses "$w/z12.log")"
"$B/weights_cmp" "$w/z12" "$w/one" 1e-5

# 16-bit gradients on the wire
losses "$w/dp.log" | tr ' ' '\n' > "$w/dp.losses"
for t in bf16 f16; do
  run mpi2 "$B/kogpt2-train" train --batch 2 --wire $t --out "$w/$t" > "$w/$t.log"
  echo "2 ranks, --wire $t: $(losses "$w/$t.log")"
  losses "$w/$t.log" | tr ' ' '\n' | paste - "$w/dp.losses" | awk -v t=$t 'NF == 2 {
    d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d }
    END { printf "losses: max |%s - f32| = %.2e (tolerance 1e-3)\n", t, m; exit m > 1e-3 }' ||
    { echo "FAIL: --wire $t moved the losses"; exit 1; }
  "$B/weights_cmp" "$w/$t" "$w/dp" 1e-2
  if "$B/weights_cmp" "$w/$t" "$w/dp" 1e-7 > /dev/null; then
    echo "FAIL: --wire $t changed nothing (no rounding on the wire?)"; exit 1
  fi
done
echo PASS
