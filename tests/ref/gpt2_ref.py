#!/usr/bin/env python3
"""gpt2_ref.py - random GPT-2 checkpoints and their PyTorch reference log-probabilities.

For each case in CASES this writes OUT/<case>/ as a Hugging Face model directory
(config.json + model.safetensors, GPT2LMHeadModel tensor names, Conv1D weights in x out)
and OUT/<case>/ref.bin, the reference the C parity test (tests/test_gpt2_parity.c) reads:

    uint32 magic 0x5250474B ("KGPR"), uint32 version 1
    int32  n_layer, n_embd, n_head, n_ctx, vocab_size, n_tokens   (the shapes, first)
    int32  tokens[n_tokens]
    float32 logprobs[n_tokens][vocab_size]   log-softmax of the logits at every position

The reference runs in float64 from exactly the weights in the file: an f16/bf16 checkpoint
is rounded to its dtype first (round to nearest even, as torch and numpy do) and the
forward pass sees those rounded values widened back. So the C side, which reads the same
bits, is held to the same tolerance whatever the stored dtype: the difference left is its
own float32 arithmetic, not the rounding of the weights.

Every case is computed twice, by a torch forward over the whole sequence (masked attention
as matrices) and by an independent numpy forward that walks the positions one by one with
a growing key/value list; the two must agree to 1e-9 or nothing is written. The script also
checks that its cases are not degenerate: the other GELU variant must move the log-probs
by more than the C test's tolerance, and the top logits must be spread out.

Usage: gpt2_ref.py OUT [--cases a,b] [--force] [--list]
Exits 0 when the files are written (or already up to date: OUT/STAMP holds the hash of
this script), 77 when torch or numpy is missing (the C tests then skip).
"""

import json
import math
import os
import struct
import sys

import ref_stamp

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # ctest's SKIP_RETURN_CODE
    print("SKIP: %s" % e)
    sys.exit(77)

MAGIC = 0x5250474B
VERSION = 1
TOL = 1e-4  # the C test's max |delta logprob|; the sanity checks below must clear it

KOGPT2 = dict(n_layer=12, n_embd=768, n_head=12, n_ctx=1024, vocab=51200)


def case(name, n_layer, n_embd, n_head, n_ctx, vocab, n_tokens, dtype="F32",
         act="gelu_new", tied=True, prefix=True, n_inner=None, eps=1e-5, seed=1, extra=False):
    return dict(name=name, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_ctx=n_ctx,
                vocab=vocab, n_tokens=n_tokens, dtype=dtype, act=act, tied=tied,
                prefix=prefix, n_inner=n_inner, eps=eps, seed=seed, extra=extra)


# Small shapes exercise every option and odd sizes (SIMD tails: hs 12, V 1001, n_inner
# not 4C); the KoGPT2-base shape is written once per dtype from one set of weights (seed).
CASES = [
    # fills its context exactly: the C test then checks that one more token is refused
    case("tiny_tanh_f32", 2, 64, 4, 32, 259, 32),
    case("tiny_erf_f32", 2, 64, 4, 32, 259, 32, act="gelu", seed=2),
    case("tiny_relu_f32", 2, 64, 4, 32, 259, 32, act="relu", seed=9),
    case("small_tanh_f16", 3, 96, 6, 48, 777, 40, dtype="F16", seed=3),
    case("small_erf_f16", 3, 96, 6, 48, 777, 40, dtype="F16", act="gelu", seed=4),
    case("small_tanh_bf16", 3, 96, 6, 48, 777, 40, dtype="BF16", seed=5),
    case("small_erf_bf16", 3, 96, 6, 48, 777, 40, dtype="BF16", act="gelu", seed=6),
    case("odd_untied_f32", 2, 72, 6, 40, 1001, 33, tied=False, n_inner=200, eps=1e-6, seed=7),
    case("noprefix_f32", 2, 64, 2, 32, 300, 20, prefix=False, extra=True, seed=8),
    case("kogpt2_f32", **KOGPT2, n_tokens=20, seed=100),
    case("kogpt2_f16", **KOGPT2, n_tokens=20, dtype="F16", seed=100),
    case("kogpt2_bf16", **KOGPT2, n_tokens=20, dtype="BF16", seed=100),
]


# ---------------------------------------------------------------- weights

def make_weights(c):
    """float32 tensors by HF name (without the "transformer." prefix; lm_head.weight
    apart). Scales are chosen so that attention is not uniform, the MLP works in GELU's
    curved region and the logits have a spread of about 3, so top-10 gaps mean something."""
    g = torch.Generator().manual_seed(c["seed"])
    C, L, V, T = c["n_embd"], c["n_layer"], c["vocab"], c["n_ctx"]
    Fw = c["n_inner"] or 4 * C

    def rn(*shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * std

    w = {}
    w["wte.weight"] = rn(V, C, std=3.0 / math.sqrt(C))
    w["wpe.weight"] = rn(T, C, std=0.05)
    for l in range(L):
        p = "h.%d." % l
        w[p + "ln_1.weight"] = 1.0 + rn(C, std=0.1)
        w[p + "ln_1.bias"] = rn(C, std=0.05)
        w[p + "attn.c_attn.weight"] = rn(C, 3 * C, std=1.0 / math.sqrt(C))
        w[p + "attn.c_attn.bias"] = rn(3 * C, std=0.05)
        w[p + "attn.c_proj.weight"] = rn(C, C, std=0.5 / math.sqrt(C))
        w[p + "attn.c_proj.bias"] = rn(C, std=0.05)
        w[p + "ln_2.weight"] = 1.0 + rn(C, std=0.1)
        w[p + "ln_2.bias"] = rn(C, std=0.05)
        w[p + "mlp.c_fc.weight"] = rn(C, Fw, std=1.0 / math.sqrt(C))
        w[p + "mlp.c_fc.bias"] = rn(Fw, std=0.05)
        w[p + "mlp.c_proj.weight"] = rn(Fw, C, std=0.5 / math.sqrt(Fw))
        w[p + "mlp.c_proj.bias"] = rn(C, std=0.05)
    w["ln_f.weight"] = 1.0 + rn(C, std=0.1)
    w["ln_f.bias"] = rn(C, std=0.05)
    if not c["tied"]:
        w["lm_head.weight"] = rn(V, C, std=3.0 / math.sqrt(C))
    return w


def round_to(w, dtype):
    """The values the file holds, as float32 tensors, and their raw little-endian bytes."""
    vals, raw = {}, {}
    for k, t in w.items():
        if dtype == "F32":
            v = t.contiguous()
            b = v.numpy().astype("<f4").tobytes()
        elif dtype == "F16":
            h = t.numpy().astype(np.float16)  # round to nearest even
            v = torch.from_numpy(h.astype(np.float32))
            b = h.astype("<f2").tobytes()
        elif dtype == "BF16":
            h = t.to(torch.bfloat16)  # round to nearest even
            v = h.to(torch.float32)
            b = h.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raise ValueError(dtype)
        vals[k], raw[k] = v, b
    return vals, raw


def file_name(c, k):
    if k == "lm_head.weight":
        return k
    return ("transformer." + k) if c["prefix"] else k


def write_safetensors(path, entries):
    """entries: list of (name, dtype, shape, bytes). Header padded with spaces to 8 bytes."""
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, dt, shape, b in entries:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for e in entries:
            f.write(e[3])
    os.replace(tmp, path)


def write_model(c, d, raw, shapes):
    os.makedirs(d, exist_ok=True)
    entries = [(file_name(c, k), c["dtype"], shapes[k], raw[k]) for k in sorted(raw)]
    if c["extra"]:
        # buffers older checkpoints carry; a loader must ignore them (a 0-d tensor and BOOL)
        T = c["n_ctx"]
        mask = np.tril(np.ones((T, T), dtype=np.uint8)).reshape(1, 1, T, T)
        for l in range(c["n_layer"]):
            entries.append(("h.%d.attn.bias" % l, "BOOL", mask.shape, mask.tobytes()))
            entries.append(("h.%d.attn.masked_bias" % l, "F32", (),
                            np.array(-1e4, dtype="<f4").tobytes()))
    write_safetensors(os.path.join(d, "model.safetensors"), entries)
    cfg = {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "activation_function": c["act"], "attn_pdrop": 0.1, "embd_pdrop": 0.1,
        "resid_pdrop": 0.1, "initializer_range": 0.02, "layer_norm_epsilon": c["eps"],
        "n_ctx": c["n_ctx"], "n_positions": c["n_ctx"], "n_embd": c["n_embd"],
        "n_head": c["n_head"], "n_layer": c["n_layer"], "n_inner": c["n_inner"],
        "vocab_size": c["vocab"], "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 3,
        "tie_word_embeddings": c["tied"], "torch_dtype": {"F32": "float32", "F16": "float16",
                                                          "BF16": "bfloat16"}[c["dtype"]],
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


# ---------------------------------------------------------------- the two forwards

def gelu_torch(x, act):
    if act == "gelu":
        return F.gelu(x)  # 0.5 x (1 + erf(x / sqrt 2))
    if act == "relu":
        return torch.relu(x)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward_torch(c, w, tokens, act, dt=torch.float64, kv=None):
    """Whole sequence at once, computed in dt (float64 for the reference): log-probs (n, V).
    kv, when given, maps each layer's keys and values (n, C) to what a KV cache holds of them
    (kv_dtype_ref.py: rounded to f16, bf16 or q8_0 blocks)."""
    C, NH = c["n_embd"], c["n_head"]
    hs = C // NH
    n = len(tokens)
    W = {k: v.to(dt) for k, v in w.items()}
    idx = torch.tensor(tokens, dtype=torch.long)
    x = W["wte.weight"][idx] + W["wpe.weight"][:n]  # (n, C)
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    for l in range(c["n_layer"]):
        p = "h.%d." % l
        h = F.layer_norm(x, (C,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], c["eps"])
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]  # (n, 3C)
        q, k, v = qkv.split(C, dim=1)
        if kv is not None:
            k, v = kv(k), kv(v)
        q = q.view(n, NH, hs).transpose(0, 1)  # (NH, n, hs)
        k = k.view(n, NH, hs).transpose(0, 1)
        v = v.view(n, NH, hs).transpose(0, 1)
        att = (q @ k.transpose(1, 2)) / math.sqrt(hs)  # (NH, n, n)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(0, 1).reshape(n, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], c["eps"])
        h = gelu_torch(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"], act)
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), W["ln_f.weight"], W["ln_f.bias"], c["eps"])
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["wte.weight"]
    logits = x @ head.t()  # (n, V)
    return torch.log_softmax(logits, dim=-1).numpy()


_erf = np.vectorize(math.erf, otypes=[np.float64])


def forward_numpy(c, w, tokens, act):
    """float64, one position at a time with a growing key/value list (the decode view):
    written independently of forward_torch. Log-probs (n, V)."""
    C, NH = c["n_embd"], c["n_head"]
    hs = C // NH
    W = {k: v.numpy().astype(np.float64) for k, v in w.items()}
    L = c["n_layer"]
    keys = [[] for _ in range(L)]
    vals = [[] for _ in range(L)]

    def ln(x, g, b):
        mu = x.mean()
        var = ((x - mu) ** 2).mean()
        return (x - mu) / math.sqrt(var + c["eps"]) * g + b

    def gelu(x):
        if act == "gelu":
            return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
        if act == "relu":
            return np.maximum(x, 0.0)
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    out = []
    head = W.get("lm_head.weight", W["wte.weight"])
    for pos, tok in enumerate(tokens):
        x = W["wte.weight"][tok] + W["wpe.weight"][pos]
        for l in range(L):
            p = "h.%d." % l
            h = ln(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"])
            qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
            keys[l].append(qkv[C:2 * C])
            vals[l].append(qkv[2 * C:])
            K, Vv = np.stack(keys[l]), np.stack(vals[l])  # (pos+1, C)
            y = np.empty(C)
            for hd in range(NH):
                s = slice(hd * hs, (hd + 1) * hs)
                sc = K[:, s] @ qkv[s] / math.sqrt(hs)
                e = np.exp(sc - sc.max())
                y[s] = (e / e.sum()) @ Vv[:, s]
            x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
            h = ln(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"])
            h = gelu(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
            x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
        x = ln(x, W["ln_f.weight"], W["ln_f.bias"])
        z = head @ x
        m = z.max()
        out.append(z - (m + math.log(np.exp(z - m).sum())))
    return np.stack(out)


# ---------------------------------------------------------------- one case

def make_tokens(c):
    g = torch.Generator().manual_seed(1000 + c["seed"])
    t = torch.randint(0, c["vocab"], (c["n_tokens"],), generator=g).tolist()
    t[1], t[2] = 0, c["vocab"] - 1  # the first and the last row of wte
    return t


def write_case(out, c, base_weights):
    d = os.path.join(out, c["name"])
    w = base_weights if base_weights is not None else make_weights(c)
    vals, raw = round_to(w, c["dtype"])
    shapes = {k: tuple(v.shape) for k, v in w.items()}
    tokens = make_tokens(c)

    ref = forward_torch(c, vals, tokens, c["act"])
    alt = forward_numpy(c, vals, tokens, c["act"])
    d_impl = float(np.abs(ref - alt).max())
    if not d_impl < 1e-9:
        sys.exit("%s: torch and numpy references differ by %.3g" % (c["name"], d_impl))
    other = "gelu" if c["act"] == "gelu_new" else "gelu_new"
    d_act = float(np.abs(ref - forward_torch(c, vals, tokens, other)).max())
    if not d_act > 10 * TOL:
        sys.exit("%s: the other GELU moves the log-probs by only %.3g" % (c["name"], d_act))
    # for the report only: how far an honest float32 forward lands from the reference
    d_f32 = float(np.abs(ref - forward_torch(c, vals, tokens, c["act"], torch.float32)).max())
    top = np.sort(ref[-1])[::-1][:11]
    spread = float(top[0] - top[10])
    if not spread > 0.5:
        sys.exit("%s: logits too flat (top-11 spread %.3g)" % (c["name"], spread))

    write_model(c, d, raw, shapes)
    n, V = ref.shape
    tmp = os.path.join(d, "ref.bin.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<II", MAGIC, VERSION))
        f.write(struct.pack("<6i", c["n_layer"], c["n_embd"], c["n_head"], c["n_ctx"], V, n))
        f.write(np.asarray(tokens, dtype="<i4").tobytes())
        f.write(ref.astype("<f4").tobytes())
    os.replace(tmp, os.path.join(d, "ref.bin"))
    print("%-16s L%d C%d NH%d T%d V%d n%d %-4s %-8s |torch-numpy| %.1e  |tanh-erf| %.1e  "
          "|torch f32| %.1e  top-11 spread %.2f" % (c["name"], c["n_layer"], c["n_embd"], c["n_head"],
                                  c["n_ctx"], V, n, c["dtype"], c["act"], d_impl, d_act,
                                  d_f32, spread), flush=True)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    opts = {a.split("=")[0]: (a.split("=", 1) + [""])[1] for a in argv if a.startswith("--")}
    if "--list" in opts:
        print("\n".join(c["name"] for c in CASES))
        return 0
    if len(args) != 1:
        print(__doc__)
        return 2
    out = args[0]
    cases = CASES
    if opts.get("--cases"):
        want = opts["--cases"].split(",")
        cases = [c for c in CASES if c["name"] in want]
        if len(cases) != len(want):
            sys.exit("unknown case in %s" % want)
    stamp = ref_stamp.digest([os.path.abspath(__file__)])
    stamp_path = os.path.join(out, "STAMP")
    fresh = "--force" not in opts and ref_stamp.matches(stamp_path, stamp)
    os.makedirs(out, exist_ok=True)
    if not fresh and os.path.exists(stamp_path):
        os.remove(stamp_path)  # the script changed: every case is rewritten
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    shared = {}  # the KoGPT2-shape weights, made once and written in each dtype
    for c in cases:
        done = os.path.exists(os.path.join(out, c["name"], "ref.bin"))
        if fresh and done:
            continue
        base = None
        if c["name"].startswith("kogpt2_"):
            if c["seed"] not in shared:
                shared.clear()
                shared[c["seed"]] = make_weights(c)
            base = shared[c["seed"]]
        write_case(out, c, base)
    if cases is CASES or fresh:  # a partial run over stale files leaves them stale
        ref_stamp.write(stamp_path, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
