#!/usr/bin/env python3
"""step_trace.py TRACE.gz - the engine's step times by the rows a step fed.

TRACE: the stderr of a kogpt2d built with a one-line probe at the end of sched_step
(server/engine/sched.c; not in the tree): `STEP <start ms> <sequences> <rows> <ms>` per step.
Prints, over the steps that advanced 12 or more sequences, the p50/p90/p99 of a step's time
by its row count (16 = the 16 streams' decode rows alone; more = a prompt chunk beside them),
and the engine's idle time between steps.
"""
import gzip
import sys

import numpy as np

rows = [l.split() for l in gzip.open(sys.argv[1], "rt") if l.startswith("STEP")]
t = np.array([float(r[1]) for r in rows])
nseq = np.array([int(r[2]) for r in rows])
nrow = np.array([int(r[3]) for r in rows])
ms = np.array([float(r[4]) for r in rows])
busy = nseq >= 12
print("steps %d (%d with >= 12 sequences): p50 %.2f ms, p99 %.2f ms"
      % (len(ms), busy.sum(), np.median(ms[busy]), np.percentile(ms[busy], 99)))
for lo, hi in [(1, 16), (16, 17), (17, 24), (24, 33), (33, 1 << 20)]:
    m = busy & (nrow >= lo) & (nrow < hi)
    if m.sum():
        print("rows [%d, %d): %5d steps, p50 %6.2f ms, p90 %6.2f, p99 %6.2f"
              % (lo, hi, m.sum(), np.median(ms[m]), np.percentile(ms[m], 90),
                 np.percentile(ms[m], 99)))
idle = t[1:] - (t[:-1] + ms[:-1])
print("idle between steps: p50 %.3f ms, p99 %.3f ms, max %.1f ms"
      % (np.median(idle), np.percentile(idle, 99), idle.max()))
