#!/usr/bin/env python3
"""explain_ref.py - PyTorch references for the logit lens and the attention view.

For each model directory given as NAME=DIR this writes OUT/NAME.bin, which the C test
tests/test_gpt2_explain.c reads:

    uint32 magic 0x5845474B ("KGEX"), uint32 version 1
    int32  n_layer, n_embd, n_head, vocab_size, n_tokens, att_pos    (the shapes, first)
    int32  tokens[n_tokens]
    float32 lens[n_layer + 1][vocab_size]   log-softmax of lm_head(ln_f(h)) at the last
                                             position, h the residual stream after the
                                             embedding (stage 0) and after each block
    float32 att[n_layer][n_head][att_pos + 1] attention probabilities of position att_pos
    float32 att_last[n_layer][n_head][n_tokens] and of the last position

The forward is written here by hand in float64 torch, from the bits of model.safetensors
(F32, F16 or BF16, widened exactly), and returns what transformers' GPT2LMHeadModel returns
with output_hidden_states and output_attentions: hidden_states[0..L-1] are the stages 0..L-1,
its hidden_states[L] is ln_f(stage L) (so the lens of stage L is the model's own logits), and
attentions[l][0, h, att_pos, :att_pos+1] is att[l][h]. The lens is ln_f then the (tied) head
on every stage. A second, independent computation of the last position's attention row
(from the keys of a plain loop over positions) must agree to 1e-9, or nothing is written.

The prompt: DIR's SentencePiece model (libsentencepiece's Python binding) encodes PROMPT
when DIR has one; otherwise n_tokens ids drawn from a fixed seed.

Usage: explain_ref.py OUT NAME=DIR [NAME=DIR ...]
Exits 0 when written (or when OUT/NAME.stamp says OUT/NAME.bin is of this script and DIR's files
as they are), 77 when torch, numpy or a model directory is missing.
"""

import glob
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

MAGIC = 0x5845474B
VERSION = 1
PROMPT = "여러분 2019년 수고하셨습니다. 올해에는 더 좋은 일이 가득하길 바랍니다. 오늘은"
N_RANDOM = 40  # prompt length of a model without a tokenizer
ATT_POS = 9    # the position whose attention is written (a middle one: keys before and after)


def read_safetensors(path):
    """{name: float64 tensor} of a safetensors file (F32/F16/BF16)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "F32":
            v = np.frombuffer(raw, dtype="<f4").astype(np.float64)
        elif t["dtype"] == "F16":
            v = np.frombuffer(raw, dtype="<f2").astype(np.float64)
        elif t["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            v = u.view(np.float32).astype(np.float64)
        else:
            continue  # old attention-mask buffers
        key = name[len("transformer."):] if name.startswith("transformer.") else name
        out[key] = torch.from_numpy(v.reshape(t["shape"]).copy())
    return out


def gelu(x, act):
    if act == "gelu":
        return F.gelu(x)
    if act == "relu":
        return torch.relu(x)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(cfg, W, tokens):
    """(hidden_states as transformers returns them, attentions (L, NH, n, n), logits (n, V))."""
    C, NH, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    hs, eps, n = C // NH, cfg.get("layer_norm_epsilon", 1e-5), len(tokens)
    act = cfg.get("activation_function", "gelu_new")
    x = W["wte.weight"][torch.tensor(tokens)] + W["wpe.weight"][:n]
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    hidden, atts = [x], []
    for l in range(L):
        p = "h.%d." % l
        h = F.layer_norm(x, (C,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = (t.view(n, NH, hs).transpose(0, 1) for t in qkv.split(C, dim=1))
        att = (q @ k.transpose(1, 2)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)  # (NH, n, n)
        atts.append(att)
        x = x + (att @ v).transpose(0, 1).reshape(n, C) @ W[p + "attn.c_proj.weight"] \
            + W[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        h = gelu(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"], act)
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
        hidden.append(x)
    final = F.layer_norm(x, (C,), W["ln_f.weight"], W["ln_f.bias"], eps)
    hidden[-1] = final  # transformers' last hidden state has ln_f applied
    head = W.get("lm_head.weight", W["wte.weight"])
    return hidden, torch.stack(atts), final @ head.t()


def lens(cfg, W, hidden):
    """(L + 1, V) log-probs at the last position: ln_f and the head on every stage."""
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    head = W.get("lm_head.weight", W["wte.weight"])
    rows = []
    for st, h in enumerate(hidden):
        x = h[-1]
        if st < len(hidden) - 1:  # the last one is ln_f(stage L) already
            x = F.layer_norm(x, (x.shape[0],), W["ln_f.weight"], W["ln_f.bias"], eps)
        rows.append(torch.log_softmax(x @ head.t(), dim=-1))
    return torch.stack(rows)


def attention_by_loop(cfg, W, tokens, pos):
    """The attention row of pos in each layer and head, from a loop over positions (numpy)."""
    C, NH, L = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    hs, eps = C // NH, cfg.get("layer_norm_epsilon", 1e-5)
    act = cfg.get("activation_function", "gelu_new")
    Wn = {k: v.numpy() for k, v in W.items()}

    def ln(x, g, b):
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g + b

    x = Wn["wte.weight"][tokens[:pos + 1]] + Wn["wpe.weight"][:pos + 1]
    out = np.zeros((L, NH, pos + 1))
    for l in range(L):
        p = "h.%d." % l
        qkv = ln(x, Wn[p + "ln_1.weight"], Wn[p + "ln_1.bias"]) @ Wn[p + "attn.c_attn.weight"] \
            + Wn[p + "attn.c_attn.bias"]
        ys = np.zeros((pos + 1, C))
        for r in range(pos + 1):
            for hd in range(NH):
                s = slice(hd * hs, (hd + 1) * hs)
                sc = qkv[:r + 1, C + hd * hs:C + (hd + 1) * hs] @ qkv[r, s] / math.sqrt(hs)
                e = np.exp(sc - sc.max())
                a = e / e.sum()
                ys[r, s] = a @ qkv[:r + 1, 2 * C + hd * hs:2 * C + (hd + 1) * hs]
                if r == pos:
                    out[l, hd] = a
        x = x + ys @ Wn[p + "attn.c_proj.weight"] + Wn[p + "attn.c_proj.bias"]
        h = torch.from_numpy(ln(x, Wn[p + "ln_2.weight"], Wn[p + "ln_2.bias"]) @
                             Wn[p + "mlp.c_fc.weight"] + Wn[p + "mlp.c_fc.bias"])
        x = x + gelu(h, act).numpy() @ Wn[p + "mlp.c_proj.weight"] + Wn[p + "mlp.c_proj.bias"]
    return out


def prompt_tokens(d, vocab):
    spm = glob.glob(os.path.join(d, "*.model"))
    if spm:
        import sentencepiece
        sp = sentencepiece.SentencePieceProcessor(model_file=spm[0])
        return sp.encode(PROMPT)
    g = torch.Generator().manual_seed(36)
    return torch.randint(0, vocab, (N_RANDOM,), generator=g).tolist()


def write(out, name, d):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    W = read_safetensors(os.path.join(d, "model.safetensors"))
    tokens = prompt_tokens(d, cfg["vocab_size"])
    hidden, atts, logits = forward(cfg, W, tokens)
    lp = lens(cfg, W, hidden)
    final = torch.log_softmax(logits[-1], dim=-1)
    if not float((lp[-1] - final).abs().max()) < 1e-12:
        sys.exit("%s: the lens of the last stage is not the model's own log-probs" % name)
    att = atts[:, :, ATT_POS, :ATT_POS + 1].numpy()  # (L, NH, ATT_POS + 1)
    att_last = atts[:, :, -1, :].numpy()  # (L, NH, n)
    d_loop = float(np.abs(att - attention_by_loop(cfg, W, tokens, ATT_POS)).max())
    if not d_loop < 1e-9:
        sys.exit("%s: the two attention computations differ by %.3g" % (name, d_loop))
    L, V = cfg["n_layer"], cfg["vocab_size"]
    tmp = os.path.join(out, name + ".bin.tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<II", MAGIC, VERSION))
        f.write(struct.pack("<6i", L, cfg["n_embd"], cfg["n_head"], V, len(tokens), ATT_POS))
        f.write(np.asarray(tokens, dtype="<i4").tobytes())
        f.write(lp.numpy().astype("<f4").tobytes())
        f.write(att.astype("<f4").tobytes())
        f.write(att_last.astype("<f4").tobytes())
    os.replace(tmp, os.path.join(out, name + ".bin"))
    top = [int(lp[st].argmax()) for st in range(L + 1)]
    print("%-10s L%d C%d NH%d V%d n%d: the top-1 by stage %s; attention by a loop %.1e"
          % (name, L, cfg["n_embd"], cfg["n_head"], V, len(tokens), top, d_loop), flush=True)


def stamp_of(d):
    """What OUT/NAME.bin was computed from: this script and DIR's files (names, sizes, times)."""
    files = "".join("%s %d %d\n" % (e.name, e.stat().st_size, e.stat().st_mtime_ns)
                    for e in sorted(os.scandir(d), key=lambda e: e.name) if e.is_file())
    return ref_stamp.digest([os.path.abspath(__file__)], files.encode())


def main(argv):
    if len(argv) < 2 or not all("=" in a for a in argv[1:]):
        print(__doc__)
        return 2
    out = argv[0]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for a in argv[1:]:
        name, d = a.split("=", 1)
        if not os.path.isfile(os.path.join(d, "model.safetensors")):
            print("SKIP: %s has no model.safetensors" % d)
            return 77
        # a second build's ctest (the sanitizers', over the same testdata) finds it written
        stamp, stamp_path = stamp_of(d), os.path.join(out, name + ".stamp")
        if os.path.exists(os.path.join(out, name + ".bin")) and \
                ref_stamp.matches(stamp_path, stamp):
            print("%-10s up to date (%s)" % (name, stamp_path))
            continue
        write(out, name, d)
        ref_stamp.write(stamp_path, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
