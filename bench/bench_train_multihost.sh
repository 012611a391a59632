#!/bin/sh
# bench_train_multihost.sh — data parallelism across "hosts" (network namespaces joined by
# veths and a bridge, tests/netns_hosts.sh; one rank per host, TCP on the veths only) on
# links shaped with tc: step time, communication time, how much of it backward hides, and
# the ring all-reduce cost model; then ZeRO-1's optimizer memory at 1, 2 and 4 ranks.
#   sudo bench/bench_train_multihost.sh [BUILD_DIR] [ROUNDS] [STEPS] > LOG
# Needs root (ip netns), an MPI build with bench_allreduce, and the test fixture's tokenizer
# (build/testdata/train: ctest -L train once). Figures only.
#
# The model: 6 layers x 256 wide, 8 heads, 64 positions, the fixture's 400-piece vocabulary
# (4.8M parameters: 19 MB of f32 gradients); --batch 4 x --seq 64 per rank, --threads 1.
# Links: unshaped veth, and tbf at 10 and 1 Gbit/s on both ends of each host's veth
# (this kernel has no netem: no added delay, the latency term is the veth's own, measured).
# Per round, interleaved (every configuration once, then the next round):
#   compute   1 rank, no communication, the same per-rank batch and threads: compute alone
#   overlap   N ranks, buckets of 1 MiB sent as backward fills them (--bucket-mb 1)
#   after     N ranks, one bucket sent after backward (--bucket-mb 8192): nothing hidden
#   comm      bench_allreduce on the same hosts and link: the bucketed all-reduce of the same
#             number of floats with no compute (communication alone), a whole-buffer one, and
#             a 1-float one (latency)
# A run reports the median of its steps 3..STEPS: ms per step and "comm" (the wait after
# backward for the gradients: communication not hidden). On this 2-core machine the N ranks
# share the cores, so a rank's compute at N = 4 is ~2x slower than alone and the step
# times are not scaling figures; the scaling efficiency below is therefore computed from the
# separated parts as a machine with a core per rank would see them: compute alone / (compute
# alone + exposed communication), with exposed = the overlap run's "comm".
# Cost model (ring all-reduce): 2 (N-1)/N x bytes / bandwidth + the measured 1-float latency.
set -eu
B=${1:-build}
rounds=${2:-3}
steps=${3:-8}
src=$(cd "$(dirname "$0")/.." && pwd)
tok=$B/testdata/train/tok.model
[ -f "$tok" ] || { echo "no $tok (run ctest -L train once)"; exit 1; }
[ -x "$B/bench_allreduce" ] || { echo "no $B/bench_allreduce (an MPI build)"; exit 1; }
B=$(cd "$B" && pwd)
. "$src/tests/netns_hosts.sh"
nh_probe || { echo "no network namespaces: $nh_why"; exit 1; }
w=$(mktemp -d /tmp/bench_train_multihost.XXXXXX)
trap 'nh_down; rm -rf "$w"' EXIT
trap 'exit 1' INT TERM HUP # the EXIT trap cleans up after a signal too (ctest's timeout)
nh_up 4 "$w"
awk 'BEGIN { srand(3); split("가 나 다 라 마 바 사 아 자 차 카 타 파 하 강 산 물 불 돌 집", s, " ");
  for (i = 0; i < 20000; i++) { l = ""; for (j = 0; j < 12; j++) l = l s[int(rand() * 20) + 1] (rand() < 0.3 ? " " : "");
  print l } }' > "$w/corpus.txt"
"$B/kogpt2-train" prepare --tokenizer "$tok" --input "$w/corpus.txt" --out "$w/data" > /dev/null 2>&1
common="--data $w/data --tokenizer $tok --n-layer 6 --n-embd 256 --n-head 8 --n-ctx 64 --seq 64
  --batch 4 --steps $steps --val-every 0 --save-every 0 --threads 1 --device cpu --force"

# shape RATE: tbf on both ends of every host's veth ("none": no qdisc)
shape() {
  i=0
  while [ $i -lt 4 ]; do
    for dev in "${nh_id}v$i" "ns:eth0"; do
      if [ "$dev" = ns:eth0 ]; then tcx="ip netns exec ${nh_id}h$i tc"; d=eth0; else tcx=tc; d=$dev; fi
      $tcx qdisc del dev $d root 2>/dev/null || true
      # burst: at least a 64 KiB TSO segment and 1 ms at the rate; queue of 10 ms
      [ "$1" = none ] || $tcx qdisc add dev $d root tbf rate "$1" burst 2mb latency 10ms
    done
    i=$((i + 1))
  done
}
# median of steps 3.. of a log: "MS COMM"
medians() {
  awk '/^step/ { n++; if (n > 2) { ms[k] = $12; c = 0; for (i = 1; i < NF; i++) if ($i == "comm") c = $(i + 1); cm[k] = c; k++ } }
    function med(a, n,   i, j, t) { for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2 }
    END { printf "%.1f %.1f\n", med(ms, k), med(cm, k) }' "$1"
}
echo "# bench_train_multihost: $(date -u +%FT%TZ), $(nproc) cores shared, rounds $rounds, steps $steps"
echo "# kernel $(uname -r); $(mpirun --version | head -n 1)"
# the model's parameters (one short run's checkpoint header)
"$B/kogpt2-train" train $common --steps 1 --out "$w/probe" > /dev/null
n=$(od -An -t u8 -j $((16 + 8 * 8)) -N 8 "$w/probe/train_state.bin" | tr -d ' ')
echo "# parameters $n ($((n * 4)) bytes of f32 gradients)"
echo "round link N mode ms_per_step comm_ms"
for r in $(seq 1 "$rounds"); do
  "$B/kogpt2-train" train $common --out "$w/c" > "$w/c.log"
  echo "$r - 1 compute $(medians "$w/c.log")"
  for link in none 10gbit 1gbit; do
    shape $link
    for N in 2 4; do
      for mode in overlap after; do
        mb=1
        [ $mode = after ] && mb=8192
        nh_mpirun -H "$(nh_hosts $N)" -np $N "$B/kogpt2-train" train $common --bucket-mb $mb \
          --out "$w/m" > "$w/m.log" 2>&1 || { cat "$w/m.log"; exit 1; }
        echo "$r $link $N $mode $(medians "$w/m.log")"
      done
      nh_mpirun -H "$(nh_hosts $N)" -np $N "$B/bench_allreduce" --floats "$n" --layers 6 \
        --bucket-mb 1 --reps 5 | sed "s/^/$r $link $N comm /"
    done
  done
  shape none
done

echo "# ZeRO-1: AdamW moments per rank (the allocation) and each rank's peak RSS, 4 steps;"
echo "# at 2 and 4 ranks the weights against plain data parallelism (weights_cmp)"
for N in 1 2 4; do
  z=--zero\ 1
  [ $N = 1 ] && z=
  # each rank's peak RSS: a python wrapper reads its child's ru_maxrss
  nh_mpirun -H "$(nh_hosts $N)" -np $N python3 -c 'import os, resource, subprocess, sys
rc = subprocess.call(sys.argv[1:])
print("rank %s peak RSS %.1f MiB" % (os.environ.get("OMPI_COMM_WORLD_RANK"), resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024), file=sys.stderr)
sys.exit(rc)' "$B/kogpt2-train" train $common --steps 4 $z --out "$w/z$N" > "$w/z.log" 2>&1 ||
    { cat "$w/z.log"; exit 1; }
  line=$(grep -h '^ZeRO-1:' "$w/z.log" | cut -d, -f1)
  echo "N=$N: ${line:-one rank holds all $n x 2 moments ($((n * 8 / 1024)) KiB)}"
  grep -o 'rank [0-9]* peak RSS [0-9.]* MiB' "$w/z.log" | sort | sed 's/^/  /'
  [ $N = 1 ] && continue
  nh_mpirun -H "$(nh_hosts $N)" -np $N "$B/kogpt2-train" train $common --steps 4 --out "$w/d$N" \
    > /dev/null 2>&1
  echo "  ZeRO-1 vs plain at $N ranks: $("$B/weights_cmp" "$w/z$N" "$w/d$N" 1e-5)"
done
