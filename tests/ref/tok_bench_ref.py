#!/usr/bin/python3
"""Encode throughput of the SentencePiece reference (python3-sentencepiece) on a JSONL file.

Usage: tok_bench_ref.py MODEL INPUT.jsonl [ROUNDS]
Prints one line: "<impl>\t<MB>\t<seconds>\t<MB/s>" for the best of ROUNDS passes (encode
only: the file is read and parsed before the clock starts).
"""
import json
import sys
import time

import sentencepiece


def main():
    sp = sentencepiece.SentencePieceProcessor(model_file=sys.argv[1])
    with open(sys.argv[2], encoding="utf-8") as f:
        lines = [json.loads(l) for l in f]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    mb = sum(len(l.encode("utf-8")) for l in lines) / 1e6
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for l in lines:
            sp.encode(l)
        best = min(best, time.perf_counter() - t0)
    print(f"python3-sentencepiece {sentencepiece.__version__}\t{mb:.2f}\t{best:.3f}\t{mb / best:.2f}")


if __name__ == "__main__":
    main()
