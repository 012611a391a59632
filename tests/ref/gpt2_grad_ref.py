#!/usr/bin/env python3
"""gpt2_grad_ref.py - random GPT-2 model dirs and their PyTorch autograd gradients.

For each case in CASES this writes OUT/<case>/ as a Hugging Face model directory (config.json
+ model.safetensors in f32, written with gpt2_ref.py's helpers) and OUT/<case>/grad.bin, the
reference the C test tests/test_gpt2_grad.c reads:

    uint32 magic 0x5247474B ("KGGR"), uint32 version 1
    int32  n_layer, n_embd, n_head, n_ctx, vocab_size, n_inner, tied, B, T, n_tensors (shapes first)
    int32  inputs[B*T], targets[B*T]            (row-major (B, T); a target of -1 is ignored)
    float64 loss                                 mean cross-entropy over the non-ignored targets
    n_tensors x { char name[64] (NUL-padded GPT2LMHeadModel name), int32 ndim, int32 shape[2],
                  float64 grad[count] }          d loss / d tensor, in the tensor's file layout

The reference runs in float64 from exactly the float32 weights in the file, so what the C side
is held to is its own float32 arithmetic. Each sequence of the batch sits at positions 0..T-1.

Checks made here, before anything is written (the script fails loudly otherwise):
  - a central finite difference in float64 (h = 1e-6) at a handful of entries per case (the
    largest-gradient entry of several tensors, and of q, k and v apart in c_attn) agrees with
    autograd: |fd - ag| <= 1e-7 + 1e-6 |ag|;
  - no parameter tensor has a zero gradient (a tensor the loss does not see tests nothing);
  - the other GELU variant moves some tensor's gradient by more than 3x the C tolerance.

Usage: gpt2_grad_ref.py OUT [--force] [--list]
Exits 0 when the files are written (or already up to date: OUT/STAMP holds the hash of this
script and of gpt2_ref.py), 77 when torch or numpy is missing (the C test then skips).
"""

import math
import os
import struct
import sys

import ref_stamp

HERE = os.path.dirname(os.path.abspath(__file__))
gpt2_ref = torch = F = None  # imported by load_torch() once the files are known to be stale


def load_torch():
    """Imports torch (3 s) through gpt2_ref.py, which exits 77 when torch or numpy is missing."""
    global gpt2_ref, torch, F
    sys.path.insert(0, HERE)
    import gpt2_ref as ref
    gpt2_ref, torch, F = ref, ref.torch, ref.F

MAGIC = 0x5247474B
VERSION = 1
FD_H = 1e-6
FD_ABS, FD_REL = 1e-7, 1e-6
GRAD_TOL = 1e-4  # the C test's relative error per tensor; the sanity check below must clear it


def case(name, n_layer, n_embd, n_head, n_ctx, vocab, B, T, ignored, act="gelu_new", tied=True,
         n_inner=None, eps=1e-5, seed=1):
    """gpt2_ref.case()'s fields (an f32 file, "transformer." names) plus the batch shape."""
    return dict(name=name, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_ctx=n_ctx,
                vocab=vocab, n_tokens=0, dtype="F32", act=act, tied=tied, prefix=True,
                n_inner=n_inner, eps=eps, seed=seed, extra=False, B=B, T=T, ignored=ignored)


# Odd sizes for the SIMD tails: head size 12, V not a multiple of 16, n_inner not 4C, N = B*T
# odd; T below n_ctx and equal to it. one_layer is the smallest, to bisect a failing op.
CASES = [
    case("tied_tanh", 2, 64, 4, 32, 259, B=2, T=16, ignored=3, seed=11),
    case("tied_erf", 2, 48, 4, 24, 203, B=2, T=24, ignored=2, act="gelu", seed=12),
    case("odd_untied", 2, 36, 3, 20, 101, B=3, T=13, ignored=4, tied=False, n_inner=100,
         eps=1e-6, seed=13),
    case("one_layer", 1, 32, 2, 8, 67, B=1, T=8, ignored=1, act="gelu", seed=14),
]


def make_batch(c):
    """inputs, targets (B, T) int64: next-token targets of random sequences, a few ignored."""
    g = torch.Generator().manual_seed(2000 + c["seed"])
    B, T, V = c["B"], c["T"], c["vocab"]
    seq = torch.randint(0, V, (B, T + 1), generator=g)
    seq[0, 1], seq[-1, 2] = 0, V - 1  # the first and the last row of wte
    inputs, targets = seq[:, :T].clone(), seq[:, 1:].clone()
    flat = targets.view(-1)
    for i in torch.randperm(B * T, generator=g)[: c["ignored"]].tolist():
        flat[i] = -1
    return inputs, targets


def loss_torch(c, W, inputs, targets):
    """Mean cross-entropy of the batch; W: tensors by name without "transformer.", any dtype."""
    C, NH = c["n_embd"], c["n_head"]
    hs = C // NH
    B, T = inputs.shape
    x = W["wte.weight"][inputs] + W["wpe.weight"][:T]  # (B, T, C)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(c["n_layer"]):
        p = "h.%d." % l
        h = F.layer_norm(x, (C,), W[p + "ln_1.weight"], W[p + "ln_1.bias"], c["eps"])
        qkv = h @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]  # (B, T, 3C)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(2, 3)) / math.sqrt(hs)  # (B, NH, T, T)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), W[p + "ln_2.weight"], W[p + "ln_2.bias"], c["eps"])
        h = gpt2_ref.gelu_torch(h @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"], c["act"])
        x = x + h @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), W["ln_f.weight"], W["ln_f.bias"], c["eps"])
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["wte.weight"]
    logits = x @ head.t()  # (B, T, V)
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1), ignore_index=-1)


def fd_points(c, grads):
    """(name, flat index) of the entries the finite difference checks."""
    L, C = c["n_layer"], c["n_embd"]
    names = ["wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.c_proj.weight",
             "h.%d.ln_2.bias" % (L - 1), "h.%d.mlp.c_fc.weight" % (L - 1),
             "h.0.mlp.c_proj.bias", "ln_f.weight"]
    if not c["tied"]:
        names.append("lm_head.weight")
    pts = [(n, int(grads[n].abs().argmax())) for n in names]
    qkv = grads["h.0.attn.c_attn.weight"]  # (C, 3C): q, k and v apart
    for part in range(3):
        sub = qkv[:, part * C:(part + 1) * C]
        r, col = divmod(int(sub.abs().argmax()), C)
        pts.append(("h.0.attn.c_attn.weight", r * 3 * C + part * C + col))
    return pts


def finite_difference(c, W, inputs, targets, grads):
    """Worst |fd - autograd| over the points; exits when one is out of tolerance."""
    worst = 0.0
    with torch.no_grad():
        for name, i in fd_points(c, grads):
            flat = W[name].view(-1)
            w0 = flat[i].item()
            flat[i] = w0 + FD_H
            up = loss_torch(c, W, inputs, targets).item()
            flat[i] = w0 - FD_H
            down = loss_torch(c, W, inputs, targets).item()
            flat[i] = w0
            fd, ag = (up - down) / (2 * FD_H), grads[name].view(-1)[i].item()
            if not abs(fd - ag) <= FD_ABS + FD_REL * abs(ag):
                sys.exit("%s: finite difference of %s[%d] is %.10g, autograd %.10g"
                         % (c["name"], name, i, fd, ag))
            worst = max(worst, abs(fd - ag) / max(abs(ag), 1e-12))
    return worst


def grads_of(c, vals, inputs, targets, dt, act):
    """d loss / d every tensor, computed in dt with the given GELU."""
    W = {k: v.to(dt).requires_grad_(True) for k, v in vals.items()}
    loss = loss_torch(dict(c, act=act), W, inputs, targets)
    loss.backward()
    return loss.item(), {k: v.grad.detach().to(torch.float64) for k, v in W.items()}


def worst_rel(grads, other):
    """max over tensors of ||other - grads|| / ||grads|| (the C test's measure)."""
    return max(float((other[k] - g).norm() / g.norm()) for k, g in grads.items())


def write_ref(path, c, inputs, targets, loss, grads):
    names = sorted(grads)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<II", MAGIC, VERSION))
        Fw = c["n_inner"] or 4 * c["n_embd"]
        f.write(struct.pack("<10i", c["n_layer"], c["n_embd"], c["n_head"], c["n_ctx"],
                            c["vocab"], Fw, int(c["tied"]), c["B"], c["T"], len(names)))
        f.write(inputs.numpy().astype("<i4").tobytes())
        f.write(targets.numpy().astype("<i4").tobytes())
        f.write(struct.pack("<d", loss))
        for k in names:
            g = grads[k]
            full = gpt2_ref.file_name(c, k).encode()
            shape = list(g.shape) + [0] * (2 - g.dim())
            f.write(full.ljust(64, b"\0"))
            f.write(struct.pack("<3i", g.dim(), *shape))
            f.write(g.numpy().astype("<f8").tobytes())
    os.replace(tmp, path)


def write_case(out, c):
    d = os.path.join(out, c["name"])
    w = gpt2_ref.make_weights(c)
    for l in range(c["n_layer"]):  # MLP inputs of std ~2.5: where tanh and erf GELU differ most
        w["h.%d.mlp.c_fc.weight" % l] *= 2.5
    vals, raw = gpt2_ref.round_to(w, "F32")
    shapes = {k: tuple(v.shape) for k, v in vals.items()}
    inputs, targets = make_batch(c)
    loss, grads = grads_of(c, vals, inputs, targets, torch.float64, c["act"])
    for k, g in grads.items():
        if not float(g.norm()) > 1e-8:
            sys.exit("%s: %s has a zero gradient" % (c["name"], k))
    W = {k: v.to(torch.float64) for k, v in vals.items()}
    fd = finite_difference(c, W, inputs, targets, grads)
    # not degenerate: the other GELU must move some tensor's gradient past the C tolerance (the
    # variants differ by < 5e-4 anywhere, so ~1e-3 relative is all they can give; an honest
    # float32 gradient is ~1e-6 away, so a swapped GELU still stands out by orders of magnitude)
    other = "gelu" if c["act"] == "gelu_new" else "gelu_new"
    d_act = worst_rel(grads, grads_of(c, vals, inputs, targets, torch.float64, other)[1])
    if not d_act > 3 * GRAD_TOL:
        sys.exit("%s: the other GELU moves the gradients by only %.3g" % (c["name"], d_act))
    # for the report only: where an honest float32 autograd lands
    loss32, grads32 = grads_of(c, vals, inputs, targets, torch.float32, c["act"])

    gpt2_ref.write_model(c, d, raw, shapes)
    write_ref(os.path.join(d, "grad.bin"), c, inputs, targets, loss, grads)
    print("%-10s L%d C%d NH%d hs%d T%d V%d F%d B%d T%d %-8s %-6s loss %.6f  torch f32: |loss| "
          "%.1e grad rel %.1e  other GELU: grad rel %.1e  FD worst rel %.1e over %d points"
          % (c["name"], c["n_layer"], c["n_embd"], c["n_head"], c["n_embd"] // c["n_head"],
             c["n_ctx"], c["vocab"], c["n_inner"] or 4 * c["n_embd"], c["B"], c["T"], c["act"],
             "tied" if c["tied"] else "untied", loss, abs(loss32 - loss),
             worst_rel(grads, grads32), d_act, fd, len(fd_points(c, grads))), flush=True)


def main(argv):
    args = [a for a in argv if not a.startswith("--")]
    if "--list" in argv:
        print("\n".join(c["name"] for c in CASES))
        return 0
    if len(args) != 1:
        print(__doc__)
        return 2
    out = args[0]
    stamp = ref_stamp.digest([os.path.abspath(__file__), os.path.join(HERE, "gpt2_ref.py")])
    stamp_path = os.path.join(out, "STAMP")
    if "--force" not in argv and ref_stamp.matches(stamp_path, stamp):
        return 0
    load_torch()
    os.makedirs(out, exist_ok=True)
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    for c in CASES:
        write_case(out, c)
    ref_stamp.write(stamp_path, stamp)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
