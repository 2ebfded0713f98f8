#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_hf (tests/fuzz/corpus/hf): small valid and nearly valid
Hugging Face files, each prefixed by the mode byte fuzz_hf.cpp reads (0: .safetensors,
1: config.json, 2: tokenizer.json [+ "\\n#config#\\n" + tokenizer_config.json]).

Usage: gen_hf_corpus.py OUT_DIR TOKENIZER_JSON TOKENIZER_CONFIG_JSON CONFIG_JSON
(the tokenizer is shrunk to its first 300 tokens and the merges among them, keeping its
pre-tokenizer, normalizer, decoder and added tokens renumbered)."""
import json
import pathlib
import struct
import sys


def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def shrink_tokenizer(tok, keep=300):
    vocab = {k: v for k, v in tok["model"]["vocab"].items() if v < keep}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m.split(" ") if isinstance(m, str) else m
        if a in vocab and b in vocab and (a + b) in vocab:
            merges.append(m)
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = merges
    for i, t in enumerate(tok.get("added_tokens", [])):
        t["id"] = keep + i
    return tok


def main():
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tok = shrink_tokenizer(json.loads(pathlib.Path(sys.argv[2]).read_text()))
    tok_cfg = json.loads(pathlib.Path(sys.argv[3]).read_text())
    tok_cfg.pop("added_tokens_decoder", None)
    cfg = json.loads(pathlib.Path(sys.argv[4]).read_text())
    f32 = struct.pack("<6f", 0.5, -1.0, 2.0, 0.0, 3.25, -0.125)
    seeds = {
        "st_basic": b"\x00" + safetensors({"a.weight": ("F32", [2, 3], f32),
                                           "b.bias": ("F16", [2], struct.pack("<2e", 1.5, -2.0)),
                                           "c": ("BF16", [1, 2], b"\x80\x3f\x00\xc0")}, {"format": "pt"}),
        "st_ints": b"\x00" + safetensors({"i": ("I64", [2], struct.pack("<2q", 1, -1)),
                                          "u": ("U8", [3], b"\x01\x02\x03"), "b": ("BOOL", [1], b"\x01")}),
        "st_empty": b"\x00" + safetensors({}),
        "st_scalar": b"\x00" + safetensors({"s": ("F64", [], struct.pack("<d", 1.0))}),
        "config_qwen35": b"\x01" + json.dumps(cfg).encode(),
        "config_llama": b"\x01" + json.dumps({
            "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": 320,
            "max_position_embeddings": 2048, "tie_word_embeddings": True}).encode(),
        "tokenizer_only": b"\x02" + json.dumps(tok).encode(),
        "tokenizer_and_config": b"\x02" + json.dumps(tok).encode() + b"\n#config#\n" + json.dumps(tok_cfg).encode(),
    }
    for name, data in seeds.items():
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main()
