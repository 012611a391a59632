#!/usr/bin/env python3
"""The table of bench_train_multihost.sh's log: per link and host count, the medians over the
rounds of each figure, the ring all-reduce cost model, how much of the communication the
overlap hides and the scaling efficiency. Figures only.

    bench/multihost_summary.py bench/results/cpu-epyc-2026-12-01/train_multihost.log

Columns (ms, medians over rounds):
  compute    1 rank alone, no communication (the same per-rank batch and threads)
  step_ov    N ranks, 1 MiB buckets sent during backward: ms per step
  exp_ov     ... its "comm": the wait after backward (communication not hidden)
  step_af    N ranks, one bucket sent after backward: ms per step
  exp_af     ... its wait (all of the communication, nothing hidden)
  alone      bench_allreduce: the bucketed all-reduce with no compute (communication alone)
  lat        bench_allreduce: a 1-float all-reduce (the latency term)
  model      2 (N-1)/N x gradient bytes / link rate + lat (no rate for the unshaped veth)
  ov/af      the median over rounds of each round's step_ov / step_af (the runs of a round
             follow each other: this ratio is the least disturbed by the machine's other load)
  hidden     1 - exp_ov / alone: the part of the communication that backward covered
  eff_ov     compute / (compute + exp_ov): scaling efficiency with a core per rank
  eff_af     compute / (compute + exp_af): the same without overlap
The ranks share 2 cores here, so step_ov and step_af are not scaling figures (a rank computes
~N/2 times slower than alone); eff_* combine the separately measured parts instead.
"""
import re
import statistics
import sys

RATE = {"10gbit": 10e9 / 8, "1gbit": 1e9 / 8}  # bytes per second


def main(path):
    rows, grad_bytes = {}, None
    for line in open(path, encoding="utf-8"):
        m = re.search(r"\((\d+) bytes of f32 gradients\)", line)
        if m:
            grad_bytes = int(m.group(1))
        f = line.split()
        if len(f) < 4 or not f[0].isdigit():
            continue
        link, n, mode = f[1], int(f[2]), f[3]
        if mode == "comm":
            kv = dict(zip(f[5::2], f[6::2]))  # after "allreduce"
            for k in ("bucketed_ms", "whole_ms", "small_ms"):
                rows.setdefault((link, n, k), []).append(float(kv[k]))
        else:
            rows.setdefault((link, n, mode + "_ms"), []).append(float(f[4]))
            rows.setdefault((link, n, mode + "_comm"), []).append(float(f[5]))
    med = {k: statistics.median(v) for k, v in rows.items()}
    compute = med[("-", 1, "compute_ms")]
    rounds = len(rows[("-", 1, "compute_ms")])
    print("# %s: %d rounds; compute alone (1 rank) %.1f ms/step; gradients %d bytes"
          % (path, rounds, compute, grad_bytes))
    print("%-7s %2s %8s %8s %8s %8s %6s %8s %8s %8s %7s %6s %6s"
          % ("link", "N", "step_ov", "exp_ov", "step_af", "exp_af", "ov/af", "alone", "lat",
             "model", "hidden", "eff_ov", "eff_af"))
    for link in ("none", "10gbit", "1gbit"):
        for n in (2, 4):
            g = lambda k: med.get((link, n, k), float("nan"))
            lat = g("small_ms")
            model = (2 * (n - 1) / n * grad_bytes / RATE[link] * 1e3 + lat
                     if link in RATE else float("nan"))
            exp_ov, exp_af, alone = g("overlap_comm"), g("after_comm"), g("bucketed_ms")
            ratio = statistics.median(a / b for a, b in zip(rows[(link, n, "overlap_ms")],
                                                            rows[(link, n, "after_ms")]))
            print("%-7s %2d %8.1f %8.1f %8.1f %8.1f %6.2f %8.1f %8.2f %8.1f %6.0f%% %5.0f%% %5.0f%%"
                  % (link, n, g("overlap_ms"), exp_ov, g("after_ms"), exp_af, ratio, alone, lat,
                     model,
                     100 * (1 - exp_ov / alone), 100 * compute / (compute + exp_ov),
                     100 * compute / (compute + exp_af)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
