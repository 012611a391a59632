#!/usr/bin/env python3
"""torch_ckpt_ref.py - PyTorch checkpoints, shards and a Hugging Face cache made by torch
from the safetensors models of gpt2_ref.py, for tests/test_model_torch.c (issue 14).

Usage: torch_ckpt_ref.py OUT GPT2_TESTDATA   (GPT2_TESTDATA: gpt2_ref.py's output)

Every file below holds the same bits as a safetensors case of GPT2_TESTDATA, so the C test
can ask for logits equal to that case's bit for bit (and to its ref.bin within tolerance):

  pt_tied_f32/      torch.save of a GPT2LMHeadModel-shaped state dict (tiny_tanh_f32): tied
                    lm_head.weight on wte's storage, the old attn.bias / attn.masked_bias
                    buffers, _metadata, archive folder "pytorch_model"
  pt_param_f16/     small_tanh_f16, every tensor an nn.Parameter (_rebuild_parameter)
  pt_bf16/          small_erf_bf16
  pt_untied_f32/    odd_untied_f32: lm_head.weight its own storage
  pt_views_f32/     noprefix_f32 with views: a transposed (column-major) matrix, two matrices
                    at offsets inside one storage, a strided slice, a strided vector, and one
                    tensor the model does not use (a warning)
  pt_zip64_f32/     pt_tied_f32's entries re-zipped with ZIP64 central records
  sharded_bin/      odd_untied_f32 as two .bin shards + pytorch_model.bin.index.json
  sharded_st/       small_tanh_f16 as two .safetensors shards + model.safetensors.index.json
  prefer/           model.safetensors (tiny_tanh_f32) and a pytorch_model.bin that would not fit
  tf_only/          config.json and tf_model.h5 only
  hub/              a hub cache: models--kgtest--tiny (refs/main -> pt_tied_f32, refs/v1 ->
                    the safetensors file), models--kgtest--sharded (sharded_bin); snapshots
                    hold symlinks into blobs/
  bad/NAME/         files the loader must refuse (malicious, broken or not a state dict);
                    bad/EXPECT.json maps NAME to the words its one-line error must contain

Exits 0 when written (or up to date: OUT/STAMP holds the hash of this script and of the
inputs' stamp), 77 when torch is missing or GPT2_TESTDATA has not been written.
"""

import argparse
import collections
import hashlib
import json
import os
import shutil
import struct
import sys
import zipfile
import zlib

import ref_stamp

try:
    import torch
except ImportError as e:  # ctest's SKIP_RETURN_CODE
    print("SKIP: %s" % e)
    sys.exit(77)

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "BOOL": torch.bool}
ST_NAMES = {v: k for k, v in DTYPES.items()}


# ---------------------------------------------------------------- reading and writing

def read_safetensors(path):
    """name -> tensor, in the file's order (torch owns copies of the bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = collections.OrderedDict()
    for k, v in header.items():
        if k == "__metadata__":
            continue
        b, e = v["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + e])
        out[k] = torch.frombuffer(raw, dtype=DTYPES[v["dtype"]]).reshape(v["shape"]).clone()
    return out


def write_safetensors(path, tensors):
    header, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for k, t in tensors.items():
        b = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dim() else \
            t.reshape(1).view(torch.uint8).numpy().tobytes()
        header[k] = {"dtype": ST_NAMES[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def copy_config(src_case, dst):
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src_case, "config.json"), os.path.join(dst, "config.json"))


def add_metadata(sd):
    """What nn.Module.state_dict() attaches: pickled through BUILD."""
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("transformer", {"version": 1})])
    return sd


def gpt2_order(tensors, n_layer, prefix, buffers, n_ctx):
    """A GPT2LMHeadModel state dict's order, with the pre-4.31 buffers in each layer."""
    p = "transformer." if prefix else ""
    sd = collections.OrderedDict()
    for k in ("wte.weight", "wpe.weight"):
        sd[p + k] = tensors[p + k]
    for l in range(n_layer):
        h = "%sh.%d." % (p, l)
        for k in ("ln_1.weight", "ln_1.bias"):
            sd[h + k] = tensors[h + k]
        if buffers:
            sd[h + "attn.bias"] = torch.tril(torch.ones(n_ctx, n_ctx, dtype=torch.bool)).view(
                1, 1, n_ctx, n_ctx)
            sd[h + "attn.masked_bias"] = torch.tensor(-1e4)
        for k in ("attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                  "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
                  "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
            sd[h + k] = tensors[h + k]
    for k in ("ln_f.weight", "ln_f.bias"):
        sd[p + k] = tensors[p + k]
    for k, t in tensors.items():  # anything else the file had (the noprefix case's buffers)
        if k not in sd:
            sd[k] = t
    return sd


# A stored zip written by hand: the cases torch never writes (ZIP64 central records for a
# small file, overlapping entries, a wrong size), with PyTorch's 64-byte data alignment.
def write_zip(path, entries, zip64=False, method=0, patch=None):
    out, central = bytearray(), []
    for name, data in entries:
        nb = name.encode()
        pad = (-(len(out) + 30 + len(nb) + 4)) % 64
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        crc = zlib.crc32(data)
        out += struct.pack("<IHHHHHIIIHH", 0x04034b50, 20, 0, method, 0, 0, crc, len(data),
                           len(data), len(nb), len(extra)) + nb + extra + data
        central.append([nb, len(out) - len(data) - len(extra) - len(nb) - 30, len(data), crc])
    if patch:
        patch(central)
    cd_off = len(out)
    for nb, off, size, crc in central:
        if zip64:
            x, sz, lho = struct.pack("<HHQQQ", 1, 24, size, size, off), 0xffffffff, 0xffffffff
        else:
            x, sz, lho = b"", size, off
        out += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014b50, 45, 45, 0, method, 0, 0, crc, sz,
                           sz, len(nb), len(x), 0, 0, 0, 0, lho) + nb + x
    n, cd_size = len(central), len(out) - cd_off
    if zip64:
        z64 = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064b50, 44, 45, 45, 0, 0, n, n, cd_size, cd_off)
        out += struct.pack("<IIQI", 0x07064b50, 0, z64, 1)
        out += struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, 0xffff, 0xffff, 0xffffffff,
                           0xffffffff, 0)
    else:
        out += struct.pack("<IHHHHIIH", 0x06054b50, 0, 0, n, n, cd_size, cd_off, 0)
    with open(path, "wb") as f:
        f.write(out)


def zip_entries(path):
    with zipfile.ZipFile(path) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def zip_entries_bytes(data):
    import io
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


# A pickle written by hand (protocol 2, as torch.save writes it), for views and keys torch
# would never produce.
def pk_str(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def pk_int(v):
    if 0 <= v < 256:
        return b"K" + bytes([v])
    if -2**31 <= v < 2**31:
        return b"J" + struct.pack("<i", v)
    return b"\x8a\x08" + struct.pack("<q", v)  # LONG1: how pickle writes 2^62 (8 bytes)


def pk_tuple(items):
    return b"(" + b"".join(items) + b"t"


def pk_global(mod, name):
    return b"c" + mod.encode() + b"\n" + name.encode() + b"\n"


def pk_tensor(key, numel, offset, size, stride, cls="FloatStorage"):
    return (pk_global("torch._utils", "_rebuild_tensor_v2") + b"(" +
            pk_tuple([pk_str("storage"), pk_global("torch", cls), pk_str(key), pk_str("cpu"),
                      pk_int(numel)]) + b"Q" + pk_int(offset) +
            pk_tuple([pk_int(x) for x in size]) + pk_tuple([pk_int(x) for x in stride]) +
            b"\x89" + pk_global("collections", "OrderedDict") + b")R" + b"tR")


def pk_state_dict(entries):
    return (b"\x80\x02" + pk_global("collections", "OrderedDict") + b")R(" +
            b"".join(pk_str(n) + t for n, t in entries) + b"u.")


class Evil:
    """The classic: unpickling this runs a shell command."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, ("echo pwned > %s" % self.path,))


# ---------------------------------------------------------------- the cases

def good_cases(out, src):
    def case(name):
        return os.path.join(src, name)

    # tied f32 with the old buffers
    t = read_safetensors(os.path.join(case("tiny_tanh_f32"), "model.safetensors"))
    sd = gpt2_order(t, 2, True, True, 32)
    sd["lm_head.weight"] = sd["transformer.wte.weight"].detach()  # the same storage
    d = os.path.join(out, "pt_tied_f32")
    copy_config(case("tiny_tanh_f32"), d)
    torch.save(add_metadata(sd), os.path.join(d, "pytorch_model.bin"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:  # copied by convert
        f.write('{"model_max_length": 32}\n')

    # f16, every tensor a Parameter
    t = read_safetensors(os.path.join(case("small_tanh_f16"), "model.safetensors"))
    sd = collections.OrderedDict((k, torch.nn.Parameter(v, requires_grad=False))
                                 for k, v in gpt2_order(t, 3, True, False, 48).items())
    d = os.path.join(out, "pt_param_f16")
    copy_config(case("small_tanh_f16"), d)
    torch.save(sd, os.path.join(d, "pytorch_model.bin"))

    # bf16
    t = read_safetensors(os.path.join(case("small_erf_bf16"), "model.safetensors"))
    d = os.path.join(out, "pt_bf16")
    copy_config(case("small_erf_bf16"), d)
    torch.save(add_metadata(gpt2_order(t, 3, True, True, 48)), os.path.join(d, "pytorch_model.bin"))

    # untied: lm_head.weight has its own storage
    t = read_safetensors(os.path.join(case("odd_untied_f32"), "model.safetensors"))
    sd = gpt2_order(t, 2, True, False, 40)
    sd["lm_head.weight"] = t["lm_head.weight"]
    d = os.path.join(out, "pt_untied_f32")
    copy_config(case("odd_untied_f32"), d)
    torch.save(add_metadata(sd), os.path.join(d, "pytorch_model.bin"))
    untied = sd

    # views (names without "transformer.", as the noprefix case has them)
    t = read_safetensors(os.path.join(case("noprefix_f32"), "model.safetensors"))
    sd = gpt2_order(t, 2, False, False, 32)
    fc = sd["h.0.mlp.c_fc.weight"]
    sd["h.0.mlp.c_fc.weight"] = fc.t().contiguous().t()  # column-major: strides (1, C)
    a, b = sd["h.0.attn.c_attn.weight"], sd["h.0.attn.c_proj.weight"]
    flat = torch.cat([torch.zeros(3), a.flatten(), b.flatten()])  # one storage, offsets 3 and 3+|a|
    sd["h.0.attn.c_attn.weight"] = flat[3:3 + a.numel()].view(a.shape)
    sd["h.0.attn.c_proj.weight"] = flat[3 + a.numel():].view(b.shape)
    wpe = sd["wpe.weight"]
    big = torch.zeros(wpe.shape[0], 2 * wpe.shape[1])
    big[:, :wpe.shape[1]] = wpe
    sd["wpe.weight"] = big[:, :wpe.shape[1]]  # strides (2C, 1)
    v = sd["h.1.ln_1.weight"]
    wide = torch.zeros(2 * v.numel())
    wide[::2] = v
    sd["h.1.ln_1.weight"] = wide[::2]  # stride 2
    sd["extra.scale"] = torch.ones(3)  # not the model's: a warning
    assert not sd["h.0.mlp.c_fc.weight"].is_contiguous() and not sd["wpe.weight"].is_contiguous()
    d = os.path.join(out, "pt_views_f32")
    copy_config(case("noprefix_f32"), d)
    torch.save(sd, os.path.join(d, "pytorch_model.bin"))

    # ZIP64 central records around pt_tied_f32's entries
    d = os.path.join(out, "pt_zip64_f32")
    copy_config(case("tiny_tanh_f32"), d)
    write_zip(os.path.join(d, "pytorch_model.bin"),
              zip_entries(os.path.join(out, "pt_tied_f32", "pytorch_model.bin")), zip64=True)

    # shards: .bin and .safetensors, each with its index
    d = os.path.join(out, "sharded_bin")
    copy_config(case("odd_untied_f32"), d)
    keys = list(untied)
    halves = [keys[:len(keys) // 2], keys[len(keys) // 2:]]
    weight_map = {}
    for i, ks in enumerate(halves):
        name = "pytorch_model-%05d-of-00002.bin" % (i + 1)
        torch.save(collections.OrderedDict((k, untied[k]) for k in ks), os.path.join(d, name))
        weight_map.update({k: name for k in ks})
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)

    d = os.path.join(out, "sharded_st")
    copy_config(case("small_tanh_f16"), d)
    t = read_safetensors(os.path.join(case("small_tanh_f16"), "model.safetensors"))
    keys = list(t)
    weight_map = {}
    for i, ks in enumerate([keys[::2], keys[1::2]]):
        name = "model-%05d-of-00002.safetensors" % (i + 1)
        write_safetensors(os.path.join(d, name), collections.OrderedDict((k, t[k]) for k in ks))
        weight_map.update({k: name for k in ks})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=1)

    # both formats: safetensors wins (the .bin is another shape and would be refused)
    d = os.path.join(out, "prefer")
    copy_config(case("tiny_tanh_f32"), d)
    shutil.copy(os.path.join(case("tiny_tanh_f32"), "model.safetensors"), d)
    shutil.copy(os.path.join(out, "pt_bf16", "pytorch_model.bin"), d)

    d = os.path.join(out, "tf_only")
    copy_config(case("tiny_tanh_f32"), d)
    with open(os.path.join(d, "tf_model.h5"), "wb") as f:
        f.write(b"\x89HDF\r\n\x1a\n")


def hub_repo(hub, repo, revisions):
    """revisions: list of (ref name, {file: source path}); blobs by content hash."""
    root = os.path.join(hub, "models--" + repo.replace("/", "--"))
    for ref, files in revisions:
        rev = hashlib.sha1(("%s@%s" % (repo, ref)).encode()).hexdigest()
        snap = os.path.join(root, "snapshots", rev)
        os.makedirs(snap, exist_ok=True)
        os.makedirs(os.path.join(root, "blobs"), exist_ok=True)
        for name, src in files.items():
            with open(src, "rb") as f:
                data = f.read()
            blob = hashlib.sha256(data).hexdigest()
            with open(os.path.join(root, "blobs", blob), "wb") as f:
                f.write(data)
            os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, name))
        os.makedirs(os.path.join(root, "refs"), exist_ok=True)
        with open(os.path.join(root, "refs", ref), "w") as f:
            f.write(rev)  # no newline, as huggingface_hub writes it


def hub_cases(out, src):
    hub = os.path.join(out, "hub")
    tied = os.path.join(out, "pt_tied_f32")
    tiny = os.path.join(src, "tiny_tanh_f32")
    hub_repo(hub, "kgtest/tiny", [
        ("main", {"config.json": os.path.join(tied, "config.json"),
                  "pytorch_model.bin": os.path.join(tied, "pytorch_model.bin")}),
        ("v1", {"config.json": os.path.join(tiny, "config.json"),
                "model.safetensors": os.path.join(tiny, "model.safetensors")})])
    sh = os.path.join(out, "sharded_bin")
    hub_repo(hub, "kgtest/sharded", [("main", {n: os.path.join(sh, n) for n in os.listdir(sh)})])
    os.makedirs(os.path.join(out, "hfhome"), exist_ok=True)  # HF_HOME/hub -> the same cache
    os.symlink(os.path.join("..", "hub"), os.path.join(out, "hfhome", "hub"))


def bad_cases(out, src):
    expect = {}
    cfg = os.path.join(src, "tiny_tanh_f32")
    tied = os.path.join(out, "pt_tied_f32", "pytorch_model.bin")

    def new(name, words):
        d = os.path.join(out, "bad", name)
        copy_config(cfg, d)
        expect[name] = words
        return os.path.join(d, "pytorch_model.bin")

    def crafted(name, words, pkl, storages, **kw):
        write_zip(new(name, words), [("archive/data.pkl", pkl)] +
                  [("archive/data/" + k, v) for k, v in storages], **kw)

    marker = os.path.join(out, "bad", "PWNED")
    torch.save({"w": torch.zeros(2), "evil": Evil(marker)}, new("os_system", "posix.system"))
    torch.save({"w": torch.zeros(2), "args": argparse.Namespace(lr=1e-4)},
               new("unknown_global", "global argparse.Namespace is not allowed"))
    torch.save({"model": {"w": torch.zeros(2)}, "epoch": 3}, new("not_state_dict",
                                                                 "not a state dict"))
    torch.save({}, new("empty_dict", "state dict is empty"))
    torch.save({"w": torch.zeros(2)}, new("legacy", "legacy format"),
               _use_new_zipfile_serialization=False)
    one = pk_state_dict([("w", pk_tensor("0", 4, 0, [4], [1]))])
    f32x4 = struct.pack("<4f", 1, 2, 3, 4)
    crafted("missing_storage", "storage archive/data/1 is not in the zip",
            pk_state_dict([("w", pk_tensor("1", 4, 0, [4], [1]))]), [("0", f32x4)])
    crafted("view_out_of_range", "runs past its storage",
            pk_state_dict([("w", pk_tensor("0", 4, 1, [2, 2], [2, 1]))]), [("0", f32x4)])
    crafted("storage_size", "holds 16 bytes, the pickle says 8 F32",
            pk_state_dict([("w", pk_tensor("0", 8, 0, [8], [1]))]), [("0", f32x4)])
    crafted("storage_key", "is not a plain name",
            pk_state_dict([("w", pk_tensor("../0", 4, 0, [4], [1]))]), [("0", f32x4)])

    def overlap(central):  # data/0's size reaches into data/1's local header
        central[1][2] += 32
    crafted("overlapping_entries", "overlap",
            pk_state_dict([("w", pk_tensor("0", 4, 0, [4], [1])),
                           ("v", pk_tensor("1", 4, 0, [4], [1]))]),
            [("0", f32x4), ("1", f32x4)], patch=overlap)
    crafted("duplicate_entry", "appears twice", one, [("0", f32x4), ("0", f32x4)])
    # ten transposed views of one 16 KB storage: 160 KB of copies from a 17 KB file
    crafted("view_copies_bomb", "more than twice the file",
            pk_state_dict([("w%d" % i, pk_tensor("0", 4096, 0, [64, 64], [1, 64]))
                           for i in range(10)]), [("0", bytes(4 * 4096))])
    # sizes that overflow 64 bits (issue 24), each in a tensor the model never uses: a
    # stride-0 view of 2^62 + 16 F32 (2^64 + 64 bytes, which wrapped to 64), copies whose sum
    # wraps, a shape product, strides, an offset, a storage's bytes, ZIP64's entry count
    w = ("transformer.wte.weight", pk_tensor("0", 4, 0, [4], [1]))
    crafted("view_stride0_wrap", "tensor extra.unused: its shape, strides or offset overflow",
            pk_state_dict([w, ("extra.unused", pk_tensor("0", 4, 0, [2**62 + 16], [0]))]),
            [("0", f32x4)])
    crafted("views_copy_sum_wrap", "tensor e3: copying its strided view",
            pk_state_dict([w] + [("e%d" % i, pk_tensor("0", 4, 0, [2**60], [0])) for i in range(4)]
                          + [("t", pk_tensor("0", 4, 0, [2, 2], [1, 2]))]), [("0", f32x4)])
    crafted("shape_product_overflow", "tensor big: its shape, strides or offset overflow",
            pk_state_dict([w, ("big", pk_tensor("0", 4, 0, [2**32, 2**32, 2], [0, 0, 0]))]),
            [("0", f32x4)])
    crafted("stride_overflow", "tensor far: its shape, strides or offset overflow",
            pk_state_dict([w, ("far", pk_tensor("0", 4, 0, [5], [2**62]))]), [("0", f32x4)])
    crafted("offset_overflow", "tensor late: its shape, strides or offset overflow",
            pk_state_dict([w, ("late", pk_tensor("0", 4, 2**63 - 1, [3], [2**62 + 1]))]),
            [("0", f32x4)])
    crafted("offset_bytes_overflow", "tensor empty: its shape, strides or offset overflow",
            pk_state_dict([w, ("empty", pk_tensor("0", 4, 2**62, [0], [1]))]), [("0", f32x4)])
    crafted("storage_bytes_overflow", "2305843009213693953 elements do not fit memory",
            pk_state_dict([w, ("huge", pk_tensor("1", 2**61 + 1, 0, [1], [1], "DoubleStorage"))]),
            [("0", f32x4), ("1", bytes(8))])
    path = new("zip64_entries_overflow", "4611686018427387905 entries, more than the 65536")
    write_zip(path, [("archive/data.pkl", one), ("archive/data/0", f32x4)], zip64=True)
    with open(path, "r+b") as f:  # the ZIP64 end record's entry count: 2^62 + 1
        data = f.read()
        f.seek(data.rindex(b"PK\x06\x06") + 32)
        f.write(struct.pack("<Q", 2**62 + 1))
    crafted("bad_opcode", "opcode 0x46 ('F')",
            b"\x80\x02}(X\x01\x00\x00\x00wF1.0\nu.", [("0", f32x4)])
    crafted("deep_marks", "nested deeper than", b"\x80\x02" + b"(" * 100 + b".", [])
    crafted("memo_unset", "memo slot 5", b"\x80\x02h\x05.", [])
    crafted("cyclic_list", "is a list, not a tensor",
            b"\x80\x02}q\x00X\x01\x00\x00\x00w]q\x01h\x01as.", [])
    crafted("no_stop", "no STOP", one[:-1], [("0", f32x4)])
    write_zip(new("big_endian", "big-endian"), [("archive/data.pkl", one),
                                                ("archive/byteorder", b"big"),
                                                ("archive/data/0", f32x4)])
    entries = zip_entries(tied)
    with zipfile.ZipFile(new("compressed", "compressed (method 8, deflate)"), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            z.writestr(name, data)
    with open(tied, "rb") as f:
        whole = f.read()
    with open(new("truncated", "truncated"), "wb") as f:
        f.write(whole[:len(whole) // 2])
    with zipfile.ZipFile(new("zip_bomb_entries", "70000 entries, more than the 65536"), "w") as z:
        for i in range(70000):
            z.writestr("archive/data/%d" % i, b"")
    with open(new("not_a_zip", "not a zip"), "wb") as f:
        f.write(b"this is a text file, not a checkpoint\n" * 4)
    shutil.copy(os.path.join(out, "pt_bf16", "pytorch_model.bin"),
                new("wrong_shape", "config says"))
    # indexes: a shard outside the directory, a tensor not where the index says
    d = os.path.dirname(new("index_escape", "not a file name in the directory"))
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"weight_map": {"transformer.wte.weight": "../pt_tied_f32/pytorch_model.bin"}},
                  f)
    d = os.path.dirname(new("index_wrong_shard", "which does not hold it"))
    shutil.copy(tied, os.path.join(d, "a.bin"))
    torch.save({"x": torch.zeros(1)}, os.path.join(d, "b.bin"))
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"weight_map": {"transformer.wte.weight": "b.bin", "x": "a.bin"}}, f)
    with open(os.path.join(out, "bad", "EXPECT.json"), "w") as f:
        json.dump(expect, f, indent=1, sort_keys=True)
    assert not os.path.exists(marker)  # writing the files ran nothing


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    out, src = argv
    stamp_in = os.path.join(src, "STAMP")
    if not os.path.exists(stamp_in):
        print("SKIP: %s has not been written (the gpt2_testdata fixture)" % src)
        return 77
    stamp = ref_stamp.digest([os.path.abspath(__file__), stamp_in])
    stamp_path = os.path.join(out, "STAMP")
    if ref_stamp.matches(stamp_path, stamp):
        return 0
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(out)
    good_cases(out, src)
    hub_cases(out, src)
    bad_cases(out, src)
    ref_stamp.write(stamp_path, stamp)
    print("wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
