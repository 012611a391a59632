#!/usr/bin/env python3
"""bench_load.py - load time of a KoGPT2-base-shape model (12 layers, 768 wide, 1024
positions, 51,200 vocabulary: 125 M parameters, f32) from pytorch_model.bin and from
model.safetensors, measured in turns in the same run by build/bench_load.

Usage: bench/bench_load.py [--build BUILD_DIR] [--dir WORK_DIR] [--runs N]

It writes the two directories once (random weights from torch: the .bin by torch.save of a
GPT2LMHeadModel-shaped state dict, tied lm_head and the old attn.bias buffers included, as
skt/kogpt2-base-v2's file has them; the .safetensors with the same bits), then runs
bench_load on both. Figures only. Needs Debian's python3-torch.
"""

import argparse
import collections
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import torch_ckpt_ref as ref  # noqa: E402  (write_safetensors)

L, C, T, V = 12, 768, 1024, 51200


def state_dict():
    g = torch.Generator().manual_seed(14)
    sd = collections.OrderedDict()

    def rn(*shape):
        return torch.randn(*shape, generator=g) * 0.02

    sd["transformer.wte.weight"] = rn(V, C)
    sd["transformer.wpe.weight"] = rn(T, C)
    for l in range(L):
        p = "transformer.h.%d." % l
        sd[p + "ln_1.weight"], sd[p + "ln_1.bias"] = torch.ones(C), torch.zeros(C)
        sd[p + "attn.bias"] = torch.tril(torch.ones(T, T, dtype=torch.bool)).view(1, 1, T, T)
        sd[p + "attn.masked_bias"] = torch.tensor(-1e4)
        sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"] = rn(C, 3 * C), torch.zeros(3 * C)
        sd[p + "attn.c_proj.weight"], sd[p + "attn.c_proj.bias"] = rn(C, C), torch.zeros(C)
        sd[p + "ln_2.weight"], sd[p + "ln_2.bias"] = torch.ones(C), torch.zeros(C)
        sd[p + "mlp.c_fc.weight"], sd[p + "mlp.c_fc.bias"] = rn(C, 4 * C), torch.zeros(4 * C)
        sd[p + "mlp.c_proj.weight"], sd[p + "mlp.c_proj.bias"] = rn(4 * C, C), torch.zeros(C)
    sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"] = torch.ones(C), torch.zeros(C)
    sd["lm_head.weight"] = sd["transformer.wte.weight"].detach()  # tied
    return sd


def write_dirs(work):
    pt, st = os.path.join(work, "pytorch"), os.path.join(work, "safetensors")
    if os.path.exists(os.path.join(st, "model.safetensors")):
        return pt, st
    os.makedirs(pt, exist_ok=True)
    os.makedirs(st, exist_ok=True)
    cfg = ('{"model_type": "gpt2", "n_layer": %d, "n_embd": %d, "n_head": 12, "n_positions": '
           '%d, "vocab_size": %d, "activation_function": "gelu_new"}\n' % (L, C, T, V))
    for d in (pt, st):
        with open(os.path.join(d, "config.json"), "w") as f:
            f.write(cfg)
    sd = state_dict()
    torch.save(sd, os.path.join(pt, "pytorch_model.bin"))
    # the model's own tensors: not the tied head, not the old buffers
    ref.write_safetensors(os.path.join(st, "model.safetensors"), collections.OrderedDict(
        (k, v) for k, v in sd.items()
        if k != "lm_head.weight" and not k.endswith((".attn.bias", ".attn.masked_bias"))))
    return pt, st


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--dir", default="/tmp/kogpt2-bench-load")
    ap.add_argument("--runs", type=int, default=7)
    a = ap.parse_args()
    pt, st = write_dirs(a.dir)
    exe = os.path.join(a.build, "bench_load")
    for d in (pt, st):
        names = [n for n in os.listdir(d) if n != "config.json"]
        size = sum(os.path.getsize(os.path.join(d, n)) for n in names)
        print("%-12s %s: %.1f MiB" % (os.path.basename(d), ", ".join(names), size / 2 ** 20))
    sys.stdout.flush()
    return subprocess.call([exe, "--runs", str(a.runs), pt, st])


if __name__ == "__main__":
    sys.exit(main())
