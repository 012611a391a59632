#!/usr/bin/env python3
"""bench_idle_rss.py - the resident memory of an idle kogpt2d, per binary, in turns (issue 34
item 6: what a CUDA build costs a CPU user). Each round starts every binary once, one after the
other, on the same model and flags, waits for /readyz and one answered next-token request,
then reads VmRSS from /proc/PID/status and counts the CUDA libraries in /proc/PID/maps; the
table gives each binary's median over the rounds. Figures only.

Usage: bench/bench_idle_rss.py [--rounds 5] [--model models/default] [--device cpu]
                               [--dtype D] NAME=PATH/TO/kogpt2d ...
--dtype passes kogpt2d --dtype D (weights converted at load, e.g. q8_0: issue 34 item 5, the
file's pages given back once converted).
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA_LIBS = ("libcudart", "libcublas", "libkgcuda", "libnccl", "libcuda.so")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=json.dumps(body) if body else None,
                  headers={"Content-Type": "application/json"} if body else {})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def measure(exe, model, device, dtype):
    """(VmRSS MiB, CUDA library files mapped) of exe serving model, idle after one request."""
    port = free_port()
    argv = [exe, "--model", model, "--host", "127.0.0.1", "--port", str(port),
            "--device", device, "--threads", "2", "--quiet"]
    if dtype:
        argv += ["--dtype", dtype]
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if p.poll() is not None:
                sys.exit("bench_idle_rss: %s exited with %d" % (exe, p.returncode))
            try:
                if request(port, "GET", "/readyz") == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        request(port, "POST", "/v1/next-token", {"text": "안녕하세요", "top_k": 10})
        time.sleep(1)  # idle
        with open("/proc/%d/status" % p.pid) as f:
            rss = [int(l.split()[1]) for l in f if l.startswith("VmRSS:")][0] / 1024
        with open("/proc/%d/maps" % p.pid) as f:
            libs = {os.path.basename(l.split()[5]) for l in f
                    if len(l.split()) >= 6 and any(c in l for c in CUDA_LIBS)}
        return rss, sorted(libs)
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="kogpt2d --dtype (default: as stored)")
    ap.add_argument("binaries", nargs="+", metavar="NAME=PATH")
    a = ap.parse_args()
    bins = [b.split("=", 1) for b in a.binaries]
    rss = {name: [] for name, _ in bins}
    libs = {}
    for r in range(a.rounds):
        load = open("/proc/loadavg").read().split()[:3]
        for name, exe in bins:
            mib, libs[name] = measure(exe, a.model, a.device, a.dtype)
            rss[name].append(mib)
            print("round %d (load %s) %-12s VmRSS %7.1f MiB  CUDA libraries mapped: %s"
                  % (r + 1, " ".join(load), name, mib, " ".join(libs[name]) or "none"),
                  flush=True)
    print("\nidle kogpt2d --device %s%s on %s, median of %d rounds:"
          % (a.device, " --dtype " + a.dtype if a.dtype else "", a.model, a.rounds))
    for name, _ in bins:
        print("  %-12s %7.1f MiB  (min %.1f, max %.1f)  CUDA libraries: %s"
              % (name, statistics.median(rss[name]), min(rss[name]), max(rss[name]),
                 " ".join(libs[name]) or "none"))


if __name__ == "__main__":
    main()
