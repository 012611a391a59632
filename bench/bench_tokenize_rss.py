#!/usr/bin/env python3
"""Large /v1/tokenize bodies on two kogpt2d builds, in interleaved rounds (issue 32 item 7):
idle RSS before and after a burst of four 1 MiB bodies sent at once (polled up to 10 s after
it: the candidate gives the memory back once its work pool is idle) and how long that took,
the burst's wall time, and the latency of /v1/tokenize bodies of 64 KiB sent one after
another (below the size that owes a malloc_trim). Each round starts each build's daemon afresh on
models/default, baseline then candidate, then candidate then baseline, ... Prints one line
per build and round, then the medians and the candidate/baseline ratios.

    python3 bench/bench_tokenize_rss.py BASELINE_BUILD CANDIDATE_BUILD [ROUNDS]

Timing on a shared machine is noisy: read the ratios of medians, not single rounds.
"""
import json
import os
import random
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import test_server_lib as lib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "default")
JSON = {"Content-Type": "application/json"}


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def idle_rss(pid):
    time.sleep(0.5)
    xs = []
    for _ in range(5):
        xs.append(rss_kb(pid))
        time.sleep(0.1)
    return sorted(xs)[2]


def bodies():
    rng = random.Random(7)
    hangul = "".join(chr(0xAC00 + rng.randrange(11172)) for _ in range(((1 << 20) - 64) // 3))
    small = "".join(chr(0xAC00 + rng.randrange(11172)) for _ in range((64 << 10) // 3))
    return (json.dumps({"text": hangul}, ensure_ascii=False).encode(),
            json.dumps({"text": small}, ensure_ascii=False).encode())


def one_round(build, big, small):
    os.environ["KG_BUILD_DIR"] = build
    d = lib.Daemon(MODEL, "--quiet")
    try:
        before = idle_rss(d.proc.pid)
        codes = []
        t0 = time.time()
        ts = [threading.Thread(target=lambda: codes.append(
            d.request("POST", "/v1/tokenize", big, JSON, timeout=600)[0])) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        t_end = time.time()
        burst_s = t_end - t0
        # the candidate gives the memory back once its work pool is idle: poll up to 10 s
        for _ in range(10):
            after = idle_rss(d.proc.pid)
            if after - before < 8 << 10:
                break
        back_s = time.time() - t_end
        lat = []
        for _ in range(20):
            t1 = time.time()
            st = d.request("POST", "/v1/tokenize", small, JSON)[0]
            lat.append(time.time() - t1)
            codes.append(st)
        return {"rss_before_kb": before, "rss_after_kb": after, "burst_s": burst_s,
                "back_s": back_s if after - before < 8 << 10 else float("nan"),
                "small_ms": 1e3 * statistics.median(lat), "codes": sorted(set(codes))}
    finally:
        d.stop()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    builds = {"baseline": sys.argv[1], "candidate": sys.argv[2]}
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    big, small = bodies()
    res = {k: [] for k in builds}
    for r in range(rounds):
        order = ["baseline", "candidate"] if r % 2 == 0 else ["candidate", "baseline"]
        for name in order:
            x = one_round(builds[name], big, small)
            res[name].append(x)
            print("round %d %-9s RSS %6d -> %6d kB (%+7d; back within 8 MB after %.1f s), "
                  "burst of 4 x 1 MiB %.2f s, 64 KiB median %.1f ms, codes %s" % (
                      r, name, x["rss_before_kb"], x["rss_after_kb"],
                      x["rss_after_kb"] - x["rss_before_kb"], x["back_s"], x["burst_s"],
                      x["small_ms"], x["codes"]), flush=True)
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("burst_s", "small_ms")}
           for k, v in res.items()}
    growth = {k: statistics.median(x["rss_after_kb"] - x["rss_before_kb"] for x in v)
              for k, v in res.items()}
    for k in builds:
        print("median %-9s RSS growth %+d kB, burst %.2f s, 64 KiB %.1f ms" % (
            k, growth[k], med[k]["burst_s"], med[k]["small_ms"]))
    print("candidate / baseline: burst %.3f, 64 KiB latency %.3f" % (
        med["candidate"]["burst_s"] / med["baseline"]["burst_s"],
        med["candidate"]["small_ms"] / med["baseline"]["small_ms"]))


if __name__ == "__main__":
    main()
