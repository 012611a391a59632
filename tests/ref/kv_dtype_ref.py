#!/usr/bin/env python3
"""kv_dtype_ref.py - a random GPT-2 and its PyTorch reference log-probabilities with the keys
and values held in each KV cache dtype kogpt2d's --kv-dtype offers, for test_gpt2_kv_dtype.c.

Writes OUT/kv_dtype/attn.bin, the attention op alone on exact float32 queries, keys and values
(the reference rounds the same float32 keys and values as the cache does: numpy's float16,
torch's bfloat16, quant_ref.py's q8_0 blocks; then float64 attention), and
OUT/kv_dtype/ (config.json + model.safetensors, gpt2_ref.py's layout) with
OUT/kv_dtype/ref_<dtype>.bin for dtype f32, f16, bf16 and q8_0, each in gpt2_ref.py's ref.bin
format (magic, version, the shapes, the tokens, log-probs at every position). The reference is
gpt2_ref.py's float64 forward with every layer's keys and values, as float32 (what the C side
computes), replaced by what the cache holds: rounded to nearest even in f16 or bf16, or
ggml's q8_0 blocks of 32 along each head (d = max|x| / 127 in float32, stored as f16;
q = x * (1 / d) rounded half away from zero; the value d_f16 * q), computed here in numpy's
float32 as the formula says. A case whose rounding moves the log-probs by less than ten times
the C test's tolerance (1e-4) is refused: the test could not tell the dtypes apart.

Usage: kv_dtype_ref.py OUT. Exits 0 when written (or up to date: OUT/kv_dtype/STAMP holds the
hash of this script and gpt2_ref.py), 77 when torch or numpy is missing.
"""

import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_stamp
try:
    import numpy as np
    import torch
    import gpt2_ref as ref
    import quant_ref
except ImportError as e:  # ctest's SKIP_RETURN_CODE
    print("SKIP: %s" % e)
    sys.exit(77)

TOL = 1e-4
# hs = 64 (two heads of 128 channels): q8_0 blocks of 32 along each head; 40 tokens fill two
# blocks of 16 positions and part of a third
CASE = ref.case("kv_dtype", 2, 128, 2, 64, 300, 40, seed=21)


def to_f16(x):
    return torch.from_numpy(x.to(torch.float32).numpy().astype(np.float16).astype(np.float64))


def to_bf16(x):
    return x.to(torch.float32).to(torch.bfloat16).to(torch.float64)


def to_q8_0(x):
    a = x.to(torch.float32).numpy().astype(np.float32)  # (n, C)
    blocks = a.reshape(a.shape[0], -1, 32)
    amax = np.abs(blocks).max(axis=2, keepdims=True).astype(np.float32)
    d = (amax / np.float32(127.0)).astype(np.float32)
    inv = np.where(d != 0, np.float32(1.0) / np.where(d != 0, d, np.float32(1.0)),
                   np.float32(0.0)).astype(np.float32)
    scaled = (blocks * inv).astype(np.float32)
    q = np.sign(scaled) * np.floor(np.abs(scaled) + np.float32(0.5))  # half away from zero
    dh = d.astype(np.float16).astype(np.float32)
    out = (dh * q.astype(np.float32)).astype(np.float32).reshape(a.shape)
    return torch.from_numpy(out.astype(np.float64))


ROUND = {"f32": None, "f16": to_f16, "bf16": to_bf16, "q8_0": to_q8_0}

# The attention op alone, on exact float32 inputs (no model in front to add float noise): 3
# sequences (pos0, n) of 2 heads of 64; their keys and values at every position, the queries of
# their new rows.
ATTN_NH, ATTN_HS = 2, 64
ATTN_SEQS = [(0, 17), (29, 1), (5, 33)]
ATTN_MAGIC = 0x414B474B  # "KGKA"


def q8_0_values(x):
    """x (rows, C) float32 through quant_ref.py's q8_0 blocks (ggml's formula) and back."""
    raw = np.frombuffer(quant_ref.q8_0(x), dtype=np.uint8).reshape(-1, 34)
    d = raw[:, :2].copy().view(np.float16).astype(np.float32)
    q = raw[:, 2:].view(np.int8).astype(np.float32)
    return (d * q).reshape(x.shape)


def attn_reference(q, k, v, pos0):
    """float64 causal attention of the n query rows at positions pos0.. over k, v (Tk, C)."""
    n, C = q.shape
    out = np.zeros((n, C))
    for h in range(ATTN_NH):
        s = slice(h * ATTN_HS, (h + 1) * ATTN_HS)
        for r in range(n):
            sc = k[:pos0 + r + 1, s].astype(np.float64) @ q[r, s].astype(np.float64)
            sc /= np.sqrt(ATTN_HS)
            e = np.exp(sc - sc.max())
            out[r, s] = (e / e.sum()) @ v[:pos0 + r + 1, s].astype(np.float64)
    return out


def write_attn(path):
    """path: magic, version, NH, hs, n_seq, (pos0, n) each; then per sequence its queries
    (n, C), keys and values (pos0 + n, C) as float32; then per dtype (f32, f16, bf16, q8_0) the
    outputs (sum n, C) as float32."""
    rng = np.random.default_rng(34)
    C = ATTN_NH * ATTN_HS
    seqs = []
    for pos0, n in ATTN_SEQS:
        q = (rng.standard_normal((n, C)) * 2).astype(np.float32)
        k = rng.standard_normal((pos0 + n, C)).astype(np.float32)
        v = rng.standard_normal((pos0 + n, C)).astype(np.float32)
        k[:, 7] *= np.float32(40)  # an outlier channel: q8_0 blocks of very different scales
        seqs.append((pos0, n, q, k, v))
    rounders = {"f32": lambda x: x, "f16": lambda x: x.astype(np.float16).astype(np.float32),
                "bf16": lambda x: torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy(),
                "q8_0": q8_0_values}
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<6I", ATTN_MAGIC, 1, ATTN_NH, ATTN_HS, len(seqs), 0))
        for pos0, n, _, _, _ in seqs:
            f.write(struct.pack("<2I", pos0, n))
        for _, _, q, k, v in seqs:
            f.write(q.astype("<f4").tobytes() + k.astype("<f4").tobytes() +
                    v.astype("<f4").tobytes())
        for name, rnd in rounders.items():
            for pos0, _, q, k, v in seqs:
                f.write(attn_reference(q, rnd(k), rnd(v), pos0).astype("<f4").tobytes())
    os.replace(path + ".tmp", path)


def main(argv):
    if len(argv) != 1:
        print(__doc__)
        return 2
    d = os.path.join(argv[0], CASE["name"])
    stamp = ref_stamp.digest([os.path.abspath(__file__), os.path.abspath(ref.__file__),
                              os.path.abspath(quant_ref.__file__)])
    stamp_path = os.path.join(d, "STAMP")
    if ref_stamp.matches(stamp_path, stamp):
        return 0
    w = ref.make_weights(CASE)
    vals, raw = ref.round_to(w, CASE["dtype"])
    tokens = ref.make_tokens(CASE)
    ref.write_model(CASE, d, raw, {k: tuple(v.shape) for k, v in w.items()})
    base = None
    for name, fn in ROUND.items():
        lp = ref.forward_torch(CASE, vals, tokens, CASE["act"], kv=fn)
        if base is None:
            base = lp
        moved = float(np.abs(lp - base).max())
        if fn is not None and not moved > 10 * TOL:
            sys.exit("kv %s moves the log-probs by only %.3g" % (name, moved))
        n, V = lp.shape
        tmp = os.path.join(d, "ref_%s.bin.tmp" % name)
        with open(tmp, "wb") as f:
            f.write(struct.pack("<II", ref.MAGIC, ref.VERSION))
            f.write(struct.pack("<6i", CASE["n_layer"], CASE["n_embd"], CASE["n_head"],
                                CASE["n_ctx"], V, n))
            f.write(np.asarray(tokens, dtype="<i4").tobytes())
            f.write(lp.astype("<f4").tobytes())
        os.replace(tmp, os.path.join(d, "ref_%s.bin" % name))
        print("kv %-5s moves the log-probs by %.2e from f32" % (name, moved), flush=True)
    write_attn(os.path.join(d, "attn.bin"))
    ref_stamp.write(stamp_path, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
