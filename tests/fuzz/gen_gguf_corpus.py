#!/usr/bin/env python3
"""Writes the kept seed corpus of the GGUF fuzzer (tests/fuzz/corpus/gguf/).

Small hand-built GGUF files (each under 4 KB), valid and broken, covering every
metadata value type, nested arrays, several tensor types, v2 and v3, a custom
alignment, and the main ways a file can be wrong. Standard library only; the
layout follows the GGUF spec (little-endian). Run from anywhere:
    python3 tests/fuzz/gen_gguf_corpus.py
Crash inputs found by fuzzing are kept next to these files as crash-*.gguf and
are not touched by this script.
"""
import pathlib
import struct

OUT = pathlib.Path(__file__).resolve().parent / "corpus" / "gguf"

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
F32_T, F16_T, Q4_0_T, Q8_0_T, Q4_K_T = 0, 1, 2, 8, 12
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<B",
       U64: "<Q", I64: "<q", F64: "<d"}


def s(text):
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(b)) + b


def val(t, v):
    if t == STR:
        return s(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(val(et, x) for x in items)
    return struct.pack(FMT[t], v)


def kv(key, t, v):
    return s(key) + struct.pack("<I", t) + val(t, v)


def tinfo(name, shape, ttype, offset):
    return s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape) + \
        struct.pack("<IQ", ttype, offset)


def gguf(kvs, tensors=(), version=3, align=32, data=b"", n_tensors=None, n_kv=None):
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    body += b"\0" * (-len(body) % align)
    return body + data


def model(version=3, align=32):
    kvs = [kv("general.architecture", STR, "llama"), kv("general.name", STR, "tiny"),
           kv("llama.block_count", U32, 1), kv("llama.embedding_length", U32, 32),
           kv("llama.rope.freq_base", F32, 10000.0),
           kv("tokenizer.ggml.model", STR, "gpt2"),
           kv("tokenizer.ggml.tokens", ARR, (STR, ["a", "b", "ab", "<s>"])),
           kv("tokenizer.ggml.merges", ARR, (STR, ["a b"])),
           kv("tokenizer.ggml.bos_token_id", U32, 3),
           kv("tokenizer.chat_template", STR, "{{ messages[0]['content'] }}")]
    if align != 32:
        kvs.insert(1, kv("general.alignment", U32, align))
    pad = lambda n: n + (-n % align)
    o1 = pad(32 * 4)
    o2 = o1 + pad(34)
    tensors = [tinfo("token_embd.weight", [32], F32_T, 0), tinfo("blk.0.attn_q.weight", [32], Q8_0_T, o1),
               tinfo("output_norm.weight", [4, 2], F16_T, o2)]
    data = bytes(range(128)) + b"\0" * (o1 - 128) + bytes(34) + b"\0" * (o2 - o1 - 34) + bytes(16)
    return gguf(kvs, tensors, version=version, align=align, data=data)


def all_types():
    kvs = [kv("t.u8", U8, 1), kv("t.i8", I8, -1), kv("t.u16", U16, 2), kv("t.i16", I16, -2),
           kv("t.u32", U32, 3), kv("t.i32", I32, -3), kv("t.f32", F32, 0.5), kv("t.bool", BOOL, 1),
           kv("t.str", STR, "x"), kv("t.u64", U64, 4), kv("t.i64", I64, -4), kv("t.f64", F64, 0.25),
           kv("t.arr", ARR, (I32, [1, 2, 3])),
           kv("t.nested", ARR, (ARR, [(STR, ["p", "q"]), (U8, [9])]))]
    return gguf(kvs)


def deep(depth):
    v = (U8, [1])
    for _ in range(depth - 1):
        v = (ARR, [v])
    return gguf([kv("x.deep", ARR, v)])


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    good = model()
    files = {
        "valid-model-v3.gguf": good,
        "valid-model-v2.gguf": model(version=2),
        "valid-model-align64.gguf": model(align=64),
        "valid-vocab-only.gguf": gguf([kv("general.architecture", STR, "llama"),
                                       kv("tokenizer.ggml.model", STR, "llama"),
                                       kv("tokenizer.ggml.tokens", ARR, (STR, ["<unk>", "<s>", "</s>", "▁a"])),
                                       kv("tokenizer.ggml.scores", ARR, (F32, [0.0, 0.0, 0.0, -1.0])),
                                       kv("tokenizer.ggml.token_type", ARR, (I32, [2, 3, 3, 1]))]),
        "valid-all-types.gguf": all_types(),
        "valid-nested-8.gguf": deep(8),
        "bad-magic.gguf": b"GGML" + good[4:],
        "bad-version-1.gguf": good[:4] + struct.pack("<I", 1) + good[8:],
        "bad-big-endian.gguf": good[:4] + struct.pack(">I", 3) + good[8:],
        "bad-truncated-header.gguf": good[:20],
        "bad-truncated-metadata.gguf": good[:400],
        "bad-counts-too-big.gguf": good[:200],
        "bad-truncated-data.gguf": good[:len(good) - 10],
        "bad-huge-tensor-count.gguf": gguf([], n_tensors=1 << 60),
        "bad-huge-kv-count.gguf": gguf([kv("a.b", U8, 1)], n_kv=(1 << 64) - 1),
        "bad-huge-array.gguf": gguf([s("a.arr") + struct.pack("<IIQ", ARR, STR, 1 << 40)]),
        "bad-string-length.gguf": gguf([s("a.str") + struct.pack("<IQ", STR, 99999999999)]),
        "bad-value-type.gguf": gguf([s("a.x") + struct.pack("<II", 13, 0)]),
        "bad-nested-9.gguf": deep(9),
        "bad-duplicate-key.gguf": gguf([kv("a.x", U32, 1), kv("a.x", U32, 2)]),
        "bad-alignment-3.gguf": gguf([kv("general.alignment", U32, 3)]),
        "bad-n-dims.gguf": gguf([], [s("w") + struct.pack("<I", 5) + struct.pack("<5Q", 1, 1, 1, 1, 1) +
                                     struct.pack("<IQ", 0, 0)], data=bytes(32)),
        "bad-zero-dim.gguf": gguf([], [tinfo("w", [4, 0], F32_T, 0)], data=bytes(32)),
        "bad-shape-overflow.gguf": gguf([], [tinfo("w", [1 << 32, 1 << 32], F32_T, 0)], data=bytes(32)),
        "bad-tensor-type.gguf": gguf([], [tinfo("w", [32], 4, 0)], data=bytes(32)),
        "bad-block-size.gguf": gguf([], [tinfo("w", [33], Q4_0_T, 0)], data=bytes(64)),
        "bad-misaligned.gguf": gguf([], [tinfo("w", [8], F32_T, 4)], data=bytes(64)),
        "bad-out-of-range.gguf": gguf([], [tinfo("w", [64], F32_T, 0)], data=bytes(64)),
        "bad-overlap.gguf": gguf([], [tinfo("a", [16], F32_T, 0), tinfo("b", [16], F32_T, 32)],
                                 data=bytes(128)),
        "bad-duplicate-tensor.gguf": gguf([], [tinfo("w", [8], F32_T, 0), tinfo("w", [8], F32_T, 32)],
                                          data=bytes(64)),
        "bad-q4k-row.gguf": gguf([], [tinfo("w", [128, 2], Q4_K_T, 0)], data=bytes(288)),
    }
    for name, data in files.items():
        assert len(data) < 4096, name
        (OUT / name).write_bytes(data)
    print(f"wrote {len(files)} files to {OUT}")


if __name__ == "__main__":
    main()
