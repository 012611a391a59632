#!/bin/sh
# test_train_multihost.sh — data parallelism across hosts: four "hosts" (network namespaces
# with their own host names, one veth each on a bridge, addresses in 198.18.0.0/24:
# tests/netns_hosts.sh), one rank on each, started by mpirun through an rsh agent that enters
# the namespace, Open MPI's TCP transport and its daemons' channel pinned to the veths (no
# shared memory, no loopback). Checks:
#   1. 4 ranks x --batch 2 for 4 steps end with the weights of 1 rank x --batch 8: max |diff|
#      <= 1e-5 (test_train_mpi.sh's tolerance: summation order only; four, a power of two,
#      so that the mean's 1/N is exact: three ranks ended 1.4e-5 apart in a Debug build);
#   2. the traffic crossed the veths: each host's veth moved at least (N-1)/N x the gradient
#      bytes x the steps (a ring all-reduce sends 2(N-1)/N x them; we ask for a quarter of
#      what it sends and receives), while the loopbacks stayed under 1/10 of that;
#   3. ZeRO-1 (--zero 1) on the same hosts ends with the same weights as plain data
#      parallelism, within 1e-5 (the same sums, reduce-scattered instead of all-reduced).
# Skips (77) without an MPI build, mpirun, the fixture, or where network namespaces cannot be
# made (not root, or a container that forbids them: the reason is printed).
set -eu
B=${KG_BUILD_DIR:?}
fx=${KG_TRAIN_TESTDATA:?}
src=${KG_SOURCE_DIR:?}
[ "${KG_MPI:-OFF}" = ON ] || { echo "SKIP: kogpt2-train was built without MPI (apt-get install libopenmpi-dev)"; exit 77; }
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not installed (openmpi-bin)"; exit 77; }
[ -f "$fx/tok.model" ] || { echo "SKIP: no fixture at $fx"; exit 77; }
. "$src/tests/netns_hosts.sh"
nh_probe || { echo "SKIP: no network namespaces: $nh_why"; exit 77; }
w=$(mktemp -d /tmp/test_train_multihost.XXXXXX)
trap 'nh_down; rm -rf "$w"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up after a signal too (ctest's timeout)
N=4
nh_up $N "$w"
run() {
  "$@" --data "$fx/data" --tokenizer "$fx/tok.model" --n-layer 2 --n-embd 32 --n-head 2 \
    --n-ctx 32 --steps 4 --seq 16 --lr 3e-3 --val-every 0 --threads 1 --device cpu
}
lo_bytes() { # the loopback's bytes in host $1
  s=$(ip -n "${nh_id}h$1" -s -o link show lo | sed 's/.*RX: *bytes[^\\]*\\ *\([0-9]*\).*TX: *bytes[^\\]*\\ *\([0-9]*\).*/\1 \2/')
  set -- $s
  echo $(($1 + $2))
}
i=0
while [ $i -lt $N ]; do echo "$(nh_veth_bytes $i) $(lo_bytes $i)" > "$w/bytes.$i"; i=$((i + 1)); done
ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
  run nh_mpirun -H "$(nh_hosts $N)" -np $N "$B/kogpt2-train" train --batch 2 --out "$w/dp" \
  > "$w/dp.log" 2>&1 || { cat "$w/dp.log"; echo "FAIL: the $N-host run failed"; exit 1; }
grep -q "x $N ranks" "$w/dp.log" || { echo "FAIL: not $N ranks"; cat "$w/dp.log"; exit 1; }
run "$B/kogpt2-train" train --batch $((2 * N)) --out "$w/one" > "$w/one.log"
losses() { awk '/^step/ { printf "%s ", $4 }' "$1"; }
echo "$N hosts: $(losses "$w/dp.log")"
echo "1 rank:  $(losses "$w/one.log")"
"$B/weights_cmp" "$w/dp" "$w/one" 1e-5

# the gradient bytes: n_params (train_state.bin's 9th u64 after the 16-byte magic and version)
n_params=$(od -An -t u8 -j $((16 + 8 * 8)) -N 8 "$w/dp/train_state.bin" | tr -d ' ')
need=$((4 * n_params * 4 * (N - 1) / N))
i=0
while [ $i -lt $N ]; do
  read -r v0 l0 < "$w/bytes.$i"
  v=$(($(nh_veth_bytes $i) - v0))
  l=$(($(lo_bytes $i) - l0))
  echo "host $i (kg-h$i): veth $v bytes, loopback $l bytes (at least $need expected on the veth)"
  [ "$v" -ge "$need" ] || { echo "FAIL: host $i's veth moved $v bytes, under $need"; exit 1; }
  [ "$l" -lt $((need / 10)) ] || { echo "FAIL: host $i's loopback moved $l bytes"; exit 1; }
  i=$((i + 1))
done

ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0" \
  run nh_mpirun -H "$(nh_hosts $N)" -np $N "$B/kogpt2-train" train --batch 2 --zero 1 \
  --out "$w/zero" > "$w/zero.log" 2>&1 || { cat "$w/zero.log"; echo "FAIL: the ZeRO-1 run failed"; exit 1; }
grep -q "^ZeRO-1: AdamW moments" "$w/zero.log" || { echo "FAIL: no ZeRO-1 line"; cat "$w/zero.log"; exit 1; }
echo "ZeRO-1:  $(losses "$w/zero.log")"
"$B/weights_cmp" "$w/zero" "$w/dp" 1e-5
echo PASS
