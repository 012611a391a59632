#!/usr/bin/env python3
"""quant_ref.py — ggml's q8_0 and q4_0 block quantization (ggml-quants.c,
quantize_row_q8_0_ref / quantize_row_q4_0_ref) in NumPy, float32 throughout as there, for
test_cpu_matmul_q.c to compare kg_quantize_rows with byte for byte.

Writes OUT: int32 rows, C; rows * C float32 values; the q8_0 blocks; the q4_0 blocks
(little-endian; a block is its f16 scale d then its codes, see model/dtype.h).

Usage: quant_ref.py OUT
"""
import os
import struct
import sys

import numpy as np

QK = 32


def q8_0(x):
    b = x.reshape(-1, QK)
    amax = np.abs(b).max(axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (b * idv[:, None]).astype(np.float32)
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # C roundf
    out = np.zeros((b.shape[0], 34), np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def q4_0(x):
    b = x.reshape(-1, QK)
    idx = np.abs(b).argmax(axis=1)  # the first element of largest magnitude, as ggml's loop
    mx = b[np.arange(b.shape[0]), idx]
    d = (mx / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    v = (b * idv[:, None] + np.float32(8.5)).astype(np.float32)
    q = np.minimum(15, np.trunc(v).astype(np.int32))  # (int8_t) truncates; MIN(15, .)
    lo, hi = q[:, :16], q[:, 16:]
    out = np.zeros((b.shape[0], 18), np.uint8)
    out[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = (lo | (hi << 4)).astype(np.uint8)
    return out.tobytes()


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    rng = np.random.default_rng(16)
    rows, C = 64, 256
    x = rng.standard_normal((rows, C)).astype(np.float32)
    x[::7] *= np.float32(30)  # some rows of large values, some outliers
    x[3, 5] = np.float32(1e3)
    x[5, :QK] = 0  # an all-zero block: d = 0
    x[6, :QK] = np.float32(0.25)  # equal values: q4_0's max lands on -8 exactly
    os.makedirs(os.path.dirname(os.path.abspath(argv[1])), exist_ok=True)
    with open(argv[1] + ".tmp", "wb") as f:
        f.write(struct.pack("<2i", rows, C))
        f.write(x.tobytes())
        f.write(q8_0(x))
        f.write(q4_0(x))
    os.replace(argv[1] + ".tmp", argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
