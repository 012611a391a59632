#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/<target>/ (run from anywhere; rewrites them;
`tests/tools/fuzz_corpus.py fuzz_pytorch` rewrites only that target's; its seeds need python3-torch).

Small, meaningful seeds: valid inputs of each format plus the edge cases the parsers must
refuse. The fuzzers grow their own corpora in temporary copies (scripts/fuzz.sh), so what
is committed stays this small set."""
import json
import os
import shutil
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# --- safetensors: 8-byte little-endian header length, JSON header, data ---
def st_file(header, data=b"", pad=True, hlen=None):
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h) if hlen is None else hlen) + h + data


def st_seeds():
    t = "fuzz_safetensors"
    write(t, "f32_2x2", st_file({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}},
                                bytes(range(16))))
    write(t, "meta_f16_bf16", st_file({
        "__metadata__": {"format": "pt"},
        "transformer.wte.weight": {"dtype": "F16", "shape": [4, 2], "data_offsets": [0, 16]},
        "transformer.h.0.ln_1.bias": {"dtype": "BF16", "shape": [2], "data_offsets": [16, 20]},
    }, bytes(20)))
    write(t, "gpt2_names", st_file({
        "wpe.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [16, 32]},
        "wte.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "lm_head.weight": {"dtype": "F32", "shape": [1, 2], "data_offsets": [32, 40]},
        "h.0.attn.c_attn.weight": {"dtype": "F32", "shape": [2, 6], "data_offsets": [40, 88]},
    }, bytes(88)))
    write(t, "other_dtypes", st_file({
        "i64": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]},
        "f64": {"dtype": "F64", "shape": [1], "data_offsets": [8, 16]},
        "u8": {"dtype": "U8", "shape": [3], "data_offsets": [16, 19]},
        "b": {"dtype": "BOOL", "shape": [1], "data_offsets": [19, 20]},
        "f8": {"dtype": "F8_E4M3", "shape": [2, 2], "data_offsets": [20, 24]},
        "i16": {"dtype": "I16", "shape": [2], "data_offsets": [24, 28]},
        "u32": {"dtype": "U32", "shape": [1], "data_offsets": [28, 32]},
    }, bytes(32)))
    write(t, "scalar_and_empty", st_file({
        "scalar": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},
        "empty": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]},
    }, bytes(4)))
    write(t, "empty_header", st_file({}))
    write(t, "max_dims", st_file({"d": {"dtype": "U8", "shape": [1] * 8, "data_offsets": [0, 1]}},
                                 b"\x01"))
    # a quantized model file (kogpt2 convert --dtype q8_0 / q4_0): f32 first, then U8 rows of
    # blocks (q8_0: 34 bytes per 32 inputs, q4_0: 18), the scheme in __metadata__
    blocks = struct.pack("<H", 0x3C00) + bytes(range(32))
    write(t, "quant_q8_0", st_file({
        "__metadata__": {"format": "pt", "kogpt2.quant": "q8_0"},
        "transformer.h.0.attn.c_attn.bias": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "transformer.h.0.attn.c_attn.weight": {"dtype": "U8", "shape": [2, 34],
                                               "data_offsets": [8, 76]},
    }, bytes(8) + blocks * 2))
    write(t, "quant_q4_0", st_file({
        "__metadata__": {"format": "pt", "kogpt2.quant": "q4_0"},
        "lm_head.weight": {"dtype": "U8", "shape": [3, 18], "data_offsets": [0, 54]},
    }, (struct.pack("<H", 0x3800) + bytes(range(16))) * 3))
    # refused: each breaks one rule
    write(t, "bad_meta_not_string", st_file({
        "__metadata__": {"format": "pt", "kogpt2.quant": 8},
        "a": {"dtype": "U8", "shape": [1, 34], "data_offsets": [0, 34]},
    }, blocks))
    write(t, "bad_overlap", st_file({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
    }, bytes(12)))
    write(t, "bad_misaligned", st_file({"a": {"dtype": "F32", "shape": [1], "data_offsets": [1, 5]}},
                                       bytes(5)))
    write(t, "bad_past_end", st_file({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}},
                                     bytes(8)))
    write(t, "bad_shape_size", st_file({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}},
                                       bytes(8)))
    write(t, "bad_dtype", st_file({"a": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}, b"x"))
    write(t, "bad_huge_dims", st_file({"a": {"dtype": "U8", "shape": [4294967296, 4294967296],
                                             "data_offsets": [0, 0]}}))
    write(t, "bad_hlen", st_file({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"x",
                                 hlen=1 << 40))
    write(t, "bad_not_object", st_file([1, 2, 3]))
    dup = (b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
           b'"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}')
    dup += b" " * (-len(dup) % 8)
    write(t, "bad_dup_names", struct.pack("<Q", len(dup)) + dup + b"xy")
    write(t, "bad_short", b"\x10\x00\x00")
    # a NUL in a name, a dtype or the scheme: cJSON would read each as its prefix (issue 24)
    write(t, "bad_nul_scheme", st_file({
        "__metadata__": {"format": "pt", "kogpt2.quant": "q8_0\u0000x"},
        "lm_head.weight": {"dtype": "U8", "shape": [1, 34], "data_offsets": [0, 34]}}, blocks))
    write(t, "bad_nul_name_dtype", st_file({
        "a\u0000b": {"dtype": "F32\u0000", "shape": [1], "data_offsets": [0, 4]}}, bytes(4)))


# --- config.json ---
def config_seeds():
    t = "fuzz_config"
    write(t, "default_model", json.dumps({
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 6, "n_head": 8,
        "n_embd": 256, "n_positions": 512, "n_ctx": 512, "vocab_size": 12000, "n_inner": 1024,
        "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new",
        "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": None},
        indent="\t"))
    write(t, "kogpt2_v2", json.dumps({
        "_name_or_path": "skt/kogpt2-base-v2", "activation_function": "gelu_new",
        "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 3, "n_ctx": 1024, "n_embd": 768,
        "n_head": 12, "n_inner": None, "n_layer": 12, "n_positions": 1024, "vocab_size": 51200,
        "layer_norm_epsilon": 1e-05, "id2label": {"0": "LABEL_0"}, "torch_dtype": "float32"},
        indent=2))
    write(t, "kogpt2_v1_gelu", '{"n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_layer": 12, '
          '"vocab_size": 50000, "activation_function": "gelu", "tie_word_embeddings": false}\n')
    write(t, "empty_object", "{}")
    write(t, "tanh_alias", '{"activation_function":"gelu_pytorch_tanh","n_embd":64,"n_head":4}')
    write(t, "bad_divisible", '{"n_embd": 100, "n_head": 3}')
    write(t, "bad_types", '{"n_layer": "12", "layer_norm_epsilon": true}')
    write(t, "bad_range", '{"n_layer": 1e30, "vocab_size": -1, "n_positions": 0.5}')
    write(t, "bad_trailing", '{"n_layer": 2} x')
    write(t, "bad_activation", '{"activation_function": "relu"}')
    write(t, "bad_not_object", '[12, 768]')
    write(t, "bad_truncated", '{"n_layer": 2, "n_he')
    write(t, "bad_nul_model_type", '{"model_type": "gpt2\\u0000neo", "n_layer": 2}')


# --- tokenizers: byte 0 even = encode the rest, odd = decode 2-byte ids ---
TEXTS = [
    "안녕하세요. 한국어 GPT-2 입니다.",
    "옛날 옛적에 호랑이가 살았습니다.\n그리고 ",
    "서울특별시 2024년 3월 15일 (금) 오후 3:30, 기온 12.5°C",
    "  두 칸  띄어쓰기\t탭\r\n줄바꿈  ",
    "emoji 😤🇰🇷👍🏽 and ASCII: Hello, world! <s></s><unk><pad><|endoftext|>",
    "漢字 ひらがな カタカナ ▁ U+2581 and ⁇ and \ufeffBOM",
    "ᄀᄀ ㄱㅏ 가가가가가가가가가가가가가가가가가가가가",
    "",
]


def tok_seeds(t):
    for i, s in enumerate(TEXTS):
        write(t, "encode_%d" % i, b"\x00" + s.encode("utf-8"))
    write(t, "encode_invalid_utf8", b"\x00abc\xc3\x28 \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82")
    write(t, "encode_overlong", b"\x00\xc0\xaf\xe0\x80\xaf")
    write(t, "encode_nul", b"\x00a\x00b")
    ids = lambda xs: b"\x01" + b"".join(struct.pack("<H", x + 1) for x in xs)  # id -1 .. V
    write(t, "decode_small", ids([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]))
    write(t, "decode_mid", ids([100, 2000, 3000, 4000, 5000, 7000, 9000, 11000, 11999]))
    write(t, "decode_bytes", ids(list(range(250, 300))))
    write(t, "decode_out_of_range", ids([5, -1, 6]))
    write(t, "decode_empty", b"\x01")


# --- HTTP: byte 0 picks the JSON route, in route_table() order ---
ROUTES = ["next-token", "generate", "completions", "tokenize", "detokenize"]


def http_seeds():
    t = "fuzz_http"

    def req(route, body, name):
        b = body if isinstance(body, (bytes, str)) else json.dumps(body, ensure_ascii=False)
        if isinstance(b, str):
            b = b.encode("utf-8")
        write(t, "%s_%s" % (route, name), bytes([ROUTES.index(route)]) + b)

    req("next-token", {"text": "여러분 2019년 수고하셨습니다. 올해에는", "top_k": 10}, "text")
    req("next-token", {"tokens": [1, 2, 3], "top_k": 100, "temperature": 0.5,
                       "speculate": True}, "tokens")
    req("next-token", {"text": "a", "tokens": [1]}, "both")
    req("next-token", {"top_k": 0, "text": "x"}, "bad_top_k")
    req("next-token", {"text": ""}, "empty")
    req("next-token", {"tokens": [1, 2, 3, 4], "explain": {"lens": True, "top_k": 3,
                                                          "attention": True, "position": 2}},
        "explain")
    req("next-token", {"text": "x", "explain": {"lens": True, "lense": 1}}, "explain_unknown")
    req("generate", {"text": "옛날 옛적에", "max_tokens": 32, "temperature": 0.8, "top_p": 0.95,
                     "seed": 7, "stop": ["\n", "다."], "stream": True}, "stream")
    req("generate", {"tokens": [10, 20], "max_tokens": 1, "temperature": 0, "top_k": 5,
                     "logprobs": 20, "ignore_eos": True, "seed": 9007199254740991}, "logprobs")
    req("generate", {"text": "x", "stop": "끝", "top_p": 0}, "bad_top_p")
    req("generate", {"text": "x", "max_tokens": 513}, "bad_max_tokens")
    req("generate", {"text": "x", "stop": ["a", "b", "c", "d", "e"]}, "bad_stop")
    req("completions", {"prompt": "한국어 모델은", "max_tokens": 16, "logprobs": 5}, "text")
    req("completions", {"prompt": [[5, 6, 7]], "echo": True, "stream": True, "n": 1,
                        "model": "kogpt2"}, "ids_echo")
    req("completions", {"prompt": ["하나"], "echo": True, "stream": False}, "echo")
    req("completions", {"prompt": "a", "echo": True, "logprobs": 1}, "echo_logprobs")
    req("completions", {"prompt": ["a", "b"], "n": 2}, "batch")
    req("tokenize", {"text": "안녕하세요"}, "text")
    req("tokenize", {"text": "\ud55c\uae00 \\u0000 escape \u00e9"}, "escapes")
    req("tokenize", b'{"text": "\\ud800"}', "lone_surrogate")
    req("detokenize", {"tokens": [25, 86, 1000, 11999]}, "tokens")
    req("detokenize", {"tokens": [12000]}, "bad_id")
    req("detokenize", {"tokens": [1.5, "x", None]}, "bad_types")
    req("tokenize", b'{"text": "a"} trailing', "trailing")
    req("tokenize", b'{"text": "a"', "truncated")
    req("tokenize", b"[1]", "not_object")


# --- pytorch_model.bin: torch.save's zip (data.pkl + data/N), and bare data.pkl pickles ---
def pytorch_seeds():
    """Written by PyTorch itself (Debian's python3-torch), small: a few tensors each. The
    hand-made cases (ZIP64 records, crafted pickles) reuse tests/ref/torch_ckpt_ref.py."""
    import collections
    import io
    import sys
    import zipfile
    import torch
    sys.path.insert(0, os.path.join(ROOT, "tests", "ref"))
    import torch_ckpt_ref as ref

    t = "fuzz_pytorch"

    def save(name, obj, **kw):
        buf = io.BytesIO()
        torch.save(obj, buf, **kw)
        write(t, name, buf.getvalue())
        return buf.getvalue()

    g = torch.Generator().manual_seed(1)
    wte = torch.randn(5, 4, generator=g)
    sd = collections.OrderedDict()
    sd["transformer.wte.weight"] = wte
    sd["transformer.h.0.attn.bias"] = torch.tril(torch.ones(3, 3, dtype=torch.bool)).view(1, 1, 3, 3)
    sd["transformer.h.0.attn.masked_bias"] = torch.tensor(-1e4)
    sd["transformer.h.0.mlp.c_fc.weight"] = torch.randn(3, 4, generator=g).t()  # a view
    sd["lm_head.weight"] = wte.detach()  # tied: wte's storage
    sd._metadata = collections.OrderedDict([("", {"version": 1})])
    tied = save("tied_f32_views", sd)
    save("params_f16", collections.OrderedDict(
        (k, torch.nn.Parameter(torch.randn(2, 3, generator=g).half(), requires_grad=False))
        for k in ("a", "b")))
    save("bf16_offsets", {"w": torch.arange(12.0).to(torch.bfloat16)[3:9].view(2, 3)})
    save("proto4", {"w": torch.ones(2)}, pickle_protocol=4)
    save("os_system", {"evil": ref.Evil("/nonexistent/PWNED")})
    entries = ref.zip_entries_bytes(tied)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            z.writestr(name, data)
    write(t, "compressed", buf.getvalue())
    path = os.path.join(CORPUS, t, "zip64")
    ref.write_zip(path, entries, zip64=True)
    for name, data in entries:  # the bare pickles: the input starts with PROTO
        if name.endswith("data.pkl"):
            write(t, "pickle_tied", data)
    f32x4 = struct.pack("<4f", 1, 2, 3, 4)
    write(t, "pickle_crafted", ref.pk_state_dict([("w", ref.pk_tensor("0", 4, 1, [1, 3], [3, 1]))]))
    ref.write_zip(os.path.join(CORPUS, t, "crafted_two_storages"),
                  [("archive/data.pkl", ref.pk_state_dict([
                      ("w", ref.pk_tensor("0", 4, 0, [2, 2], [1, 2])),
                      ("v", ref.pk_tensor("1", 4, 0, [4], [1], "HalfStorage"))])),
                   ("archive/byteorder", b"little"), ("archive/data/0", f32x4),
                   ("archive/data/1", f32x4)])
    write(t, "truncated", tied[:len(tied) - 30])
    pytorch_extreme_seeds(t, ref)


def pytorch_extreme_seeds(t, ref):
    """Views at the edges of 64-bit arithmetic (issue 24). The "wide" seeds load, but write
    every number as an 8-byte LONG1, so that one changed byte turns a 0 into 2^56..2^62:
    the empty view (0, 2^31) with strides (0, 0) becomes 2^62+ elements whose bytes wrap
    past 2^64 (a stride-0 view of 2^62 + 16 F32 once passed as 64 bytes and was copied into
    them). The "edge" seeds are refused: each number as large as its check allows."""
    def long8(v):  # LONG1 of 8 bytes, as pickle writes an int of 2^55 and more
        return b"\x8a\x08" + struct.pack("<q", v)

    def view(key, numel, offset, size, stride, cls="FloatStorage"):
        ints = lambda xs: ref.pk_tuple([long8(x) for x in xs])
        return (ref.pk_global("torch._utils", "_rebuild_tensor_v2") + b"(" +
                ref.pk_tuple([ref.pk_str("storage"), ref.pk_global("torch", cls),
                              ref.pk_str(key), ref.pk_str("cpu"), long8(numel)]) + b"Q" +
                long8(offset) + ints(size) + ints(stride) + b"\x89" +
                ref.pk_global("collections", "OrderedDict") + b")R" + b"tR")

    def ckpt(name, entries, storages):
        ref.write_zip(os.path.join(CORPUS, t, name),
                      [("archive/data.pkl", ref.pk_state_dict(entries)),
                       ("archive/byteorder", b"little")] +
                      [("archive/data/" + k, v) for k, v in storages])

    f32x4 = struct.pack("<4f", 1, 2, 3, 4)
    # w in place, t copied (a transpose), z empty: any of z's high bytes set makes it huge
    ckpt("wide_empty_f32", [("w", view("0", 4, 0, [4], [1])),
                            ("t", view("0", 4, 0, [2, 2], [1, 2])),
                            ("z", view("0", 4, 0, [0, 2**31], [0, 0]))], [("0", f32x4)])
    ckpt("wide_empty_f16", [("t", view("0", 8, 1, [3, 2], [1, 3], "HalfStorage")),
                            ("z", view("0", 8, 0, [2**32, 0], [0, 0], "HalfStorage")),
                            ("b", view("1", 4, 0, [2, 2], [2, 1], "BoolStorage"))],
         [("0", bytes(16)), ("1", bytes(4))])
    # offsets and strides in 8 bytes: a broadcast row, a strided slice, a view at an offset
    ckpt("wide_strides", [("row", view("0", 4, 0, [3, 4], [0, 1])),
                          ("odd", view("0", 4, 1, [2], [2])),
                          ("tail", view("0", 4, 3, [1, 1], [1, 1]))], [("0", f32x4)])
    # four stride-0 views whose copies together are just under the file's bound
    ckpt("wide_broadcasts", [("e%d" % i, view("0", 4, 0, [16], [0])) for i in range(4)],
         [("0", f32x4)])
    # refused, at the edges: a broadcast of 2^40 (too much to copy), a shape product, strides
    # and an offset each past 2^64, a storage of 2^61 doubles
    ckpt("edge_broadcast_2e40", [("w", view("0", 4, 0, [2**40], [0]))], [("0", f32x4)])
    ckpt("edge_shape_product", [("w", view("0", 4, 0, [2**32, 2**32, 2], [0, 0, 0]))],
         [("0", f32x4)])
    ckpt("edge_stride", [("w", view("0", 4, 0, [5], [2**62]))], [("0", f32x4)])
    ckpt("edge_offset", [("w", view("0", 4, 2**63 - 1, [3], [2**62 + 1]))], [("0", f32x4)])
    ckpt("edge_storage", [("w", view("0", 2**61 + 1, 0, [1], [1], "DoubleStorage"))],
         [("0", bytes(8))])


SEEDS = {"fuzz_safetensors": lambda: st_seeds(), "fuzz_config": lambda: config_seeds(),
         "fuzz_tok_spm": lambda: tok_seeds("fuzz_tok_spm"),
         "fuzz_tok_bpe": lambda: tok_seeds("fuzz_tok_bpe"), "fuzz_http": lambda: http_seeds(),
         "fuzz_pytorch": lambda: pytorch_seeds()}


def main(targets):
    """No arguments: every target's corpus; else only the targets named."""
    for t in targets or list(SEEDS):
        shutil.rmtree(os.path.join(CORPUS, t), ignore_errors=True)
        SEEDS[t]()


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
