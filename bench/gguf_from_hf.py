#!/usr/bin/python3
"""gguf_from_hf.py — a GPT-2 model directory (config.json + model.safetensors, F32 or F16) as a
GGUF file for llama.cpp's "gpt2" architecture, so that bench_vs_llama.sh can time llama.cpp on
the very weights bench_model times. Only for benchmarking: the vocabulary is a placeholder
(4 control tokens, GPT-2's 256 byte tokens, which llama.cpp's loader looks up, then "<tN>"),
which is all llama-bench needs, since it feeds token ids.

    gguf_from_hf.py MODEL_DIR OUT.gguf f32|f16    (needs LLAMA_CPP/gguf-py on PYTHONPATH)

Tensor layout as llama.cpp's own converter writes GPT-2: Conv1D weights (in, out) stored
transposed, 1-D tensors in f32, and the tied LM head written out as a copy of the embedding.
"""
import json
import struct
import sys

import numpy as np

import gguf


def read_safetensors(path):
    """{name: numpy array view} over a memory map of the file."""
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + hlen)
    dtypes = {"F32": np.float32, "F16": np.float16}
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


def byte_tokens():
    """GPT-2's 256 byte-level token strings, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:  # unprintable bytes map to code points from 256 on
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("f32", "f16"):
        sys.exit("usage: gguf_from_hf.py MODEL_DIR OUT.gguf f32|f16")
    model_dir, out_path, ftype = sys.argv[1:4]
    cfg = json.load(open(f"{model_dir}/config.json"))
    t = read_safetensors(f"{model_dir}/model.safetensors")
    p = "transformer." if "transformer.wte.weight" in t else ""
    V, C = cfg["vocab_size"], cfg["n_embd"]
    if V < 260:
        sys.exit("gguf_from_hf.py: the placeholder vocabulary needs vocab_size >= 260")

    w = gguf.GGUFWriter(out_path, "gpt2")
    w.add_name("kogpt2-bench")
    w.add_block_count(cfg["n_layer"])
    w.add_context_length(cfg.get("n_ctx", cfg.get("n_positions")))
    w.add_embedding_length(C)
    w.add_feed_forward_length(cfg.get("n_inner") or 4 * C)
    w.add_head_count(cfg["n_head"])
    w.add_layer_norm_eps(cfg.get("layer_norm_epsilon", 1e-5))
    w.add_file_type(
        gguf.LlamaFileType.ALL_F32 if ftype == "f32" else gguf.LlamaFileType.MOSTLY_F16
    )
    tokens = ["<s>", "</s>", "<unk>", "<pad>"] + byte_tokens()
    tokens += [f"<t{i}>" for i in range(len(tokens), V)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL] * 4 + [gguf.TokenType.NORMAL] * (V - 4))
    w.add_token_merges(["\u0120 t"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)

    wtype = np.float32 if ftype == "f32" else np.float16

    def add(name, a, matrix):
        w.add_tensor(name, np.ascontiguousarray(a.astype(wtype if matrix else np.float32)))

    add("token_embd.weight", t[p + "wte.weight"], True)
    add("position_embd.weight", t[p + "wpe.weight"], True)
    names = {"ln_1": "attn_norm", "ln_2": "ffn_norm", "attn.c_attn": "attn_qkv",
             "attn.c_proj": "attn_output", "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
    for i in range(cfg["n_layer"]):
        for hf, gg in names.items():
            weight = t[f"{p}h.{i}.{hf}.weight"]
            add(f"blk.{i}.{gg}.weight", weight.T if weight.ndim == 2 else weight, weight.ndim == 2)
            add(f"blk.{i}.{gg}.bias", t[f"{p}h.{i}.{hf}.bias"], False)
    add("output_norm.weight", t[p + "ln_f.weight"], False)
    add("output_norm.bias", t[p + "ln_f.bias"], False)
    add("output.weight", t.get("lm_head.weight", t[p + "wte.weight"]), True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
