#!/usr/bin/env python3
"""Write a random-weight GGUF with the exact tensor shapes of a published model (numpy only).

For speed benchmarks of the back-ends: the weight values are random (speed does not
depend on them) but every tensor has the published shape and a realistic GGUF type,
so the bytes read per token are the real model's. Quantized blocks are random bytes
with their scale fields set to small fixed values, so activations stay finite.
A pool of random bytes is reused across tensors, so a 20 GB file takes seconds.

Shapes (--shape):
  smollm2-135m    llama, Q4_1 (as the default model), tied embeddings
  llama3-8b       llama, Q4_K_M-like: Q4_K, with Q6_K for attn_v, ffn_down and output
  qwen35-9b       qwen35 (Gated DeltaNet hybrid): Q4_K, Q6_K attn_v / ffn_down / output
  qwen35-35b-a3b  qwen35moe: 256 experts top-8, Q4_K, Q6_K attn_v / ffn_down(_exps) / output

The tokenizer comes from a donor GGUF (--tokenizer, e.g. the SmolLM2 default model or
a file written by --extract-tokenizer); its vocabulary is padded with unused
control tokens up to the model's vocabulary size.

Usage:
  python3 benchmarks/make_random_gguf.py --extract-tokenizer SRC.gguf OUT_TOK.gguf
  python3 benchmarks/make_random_gguf.py --shape llama3-8b --tokenizer TOK.gguf OUT.gguf
  python3 benchmarks/make_random_gguf.py --shape qwen35-35b-a3b --layers 8 --tokenizer TOK.gguf OUT.gguf
"""
import argparse
import struct
import sys
import time

import numpy as np

# GGUF metadata value types.
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
          I64: "<q", F64: "<d"}
# ggml tensor types: id, block elements, block bytes.
T_F32, T_F16, T_Q4_0, T_Q4_1, T_Q8_0, T_Q3_K, T_Q4_K, T_Q6_K = 0, 1, 2, 3, 8, 11, 12, 14
BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_Q4_0: (32, 18), T_Q4_1: (32, 20), T_Q8_0: (32, 34), T_Q3_K: (256, 110),
         T_Q4_K: (256, 144), T_Q6_K: (256, 210)}
# --mix: the types of the bulk (t) and of attn_v / ffn_down (t6) in place of the shape's Q4_K / Q6_K
MIXES = {"q4_k_m": None, "q3_k_m": (T_Q3_K, T_Q4_K)}


class Reader:
    def __init__(self, data):
        self.d = data
        self.o = 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = bytes(self.d[self.o:self.o + n])
        self.o += n
        return s

    def value(self, t):
        if t == STR:
            return self.string()
        if t == ARR:
            et = self.take("<I")
            n = self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def read_kv(path):
    """The metadata of a GGUF file as [(key, type, value)] (tensors are not read)."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    r = Reader(memoryview(data))
    if bytes(data[:4]) != b"GGUF":
        sys.exit(f"{path}: not a GGUF file")
    r.o = 4
    r.take("<I")
    r.take("<Q")
    n_kv = r.take("<Q")
    out = []
    for _ in range(n_kv):
        key = r.string().decode()
        t = r.take("<I")
        out.append((key, t, r.value(t)))
    return out


class Writer:
    def __init__(self):
        self.kv = []
        self.tensors = []  # (name, dims, type, nbytes, fill)

    def add(self, key, t, v):
        self.kv.append((key.encode() if isinstance(key, str) else key, t, v))

    def s(self, key, v):
        self.add(key, STR, v.encode())

    def u32(self, key, v):
        self.add(key, U32, int(v))

    def f32(self, key, v):
        self.add(key, F32, float(v))

    def tensor(self, name, dims, ttype, fill):
        n = int(np.prod(dims))
        be, bb = BLOCK[ttype]
        assert n % be == 0 and dims[0] % be == 0, (name, dims)
        self.tensors.append((name, dims, ttype, n // be * bb, fill))

    @staticmethod
    def enc_value(t, v):
        if t == STR:
            return struct.pack("<Q", len(v)) + v
        if t == ARR:
            et, items = v
            if et in SCALAR:
                fmt = SCALAR[et][1]
                return struct.pack("<IQ", et, len(items)) + np.array(items, dtype=np.dtype("<" + {
                    "B": "u1", "b": "i1", "H": "u2", "h": "i2", "I": "u4", "i": "i4", "f": "f4", "?": "?",
                    "Q": "u8", "q": "i8", "d": "f8"}[fmt])).tobytes()
            return struct.pack("<IQ", et, len(items)) + b"".join(Writer.enc_value(et, x) for x in items)
        return struct.pack(SCALAR[t], v)

    def write(self, path, pool):
        align = 32
        head = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
        for k, t, v in self.kv:
            head += struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + self.enc_value(t, v)
        off = 0
        offsets = []
        for name, dims, ttype, nbytes, _ in self.tensors:
            nb = name.encode()
            head += struct.pack("<Q", len(nb)) + nb + struct.pack("<I", len(dims))
            head += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ttype, off)
            offsets.append(off)
            off += (nbytes + align - 1) // align * align
        head += b"\0" * ((-len(head)) % align)
        total = 0
        with open(path, "wb") as f:
            f.write(head)
            pos = 0
            for (name, dims, ttype, nbytes, fill), o in zip(self.tensors, offsets):
                assert pos == o
                buf = fill(ttype, nbytes, dims, pool)
                f.write(buf)
                pad = (-nbytes) % align
                f.write(b"\0" * pad)
                pos += nbytes + pad
                total += nbytes
        return len(head) + pos


class Pool:
    """Random bytes reused across tensors (a rotating window)."""

    def __init__(self, size, seed):
        self.buf = np.random.default_rng(seed).integers(0, 256, size=size, dtype=np.uint8)
        self.at = 0

    def take(self, n):
        out = np.empty(n, dtype=np.uint8)
        done = 0
        while done < n:
            k = min(n - done, len(self.buf) - self.at)
            out[done:done + k] = self.buf[self.at:self.at + k]
            done += k
            self.at = (self.at + k * 7 + 4096) % (len(self.buf) - 1)
        return out


def f16(x):
    return np.frombuffer(np.array([x], dtype="<f2").tobytes(), dtype=np.uint8)


def quant_random(ttype, nbytes, dims, pool):
    """Random blocks whose scales give weights of standard deviation ~0.02."""
    b = pool.take(nbytes)
    be, bb = BLOCK[ttype]
    blocks = b.reshape(-1, bb)
    if ttype == T_Q4_K:  # d, dmin, 12 bytes of 6-bit scales / mins, 128 bytes of nibbles
        blocks[:, 0:2] = f16(1.0e-4)
        blocks[:, 2:4] = f16(7.5e-4)
    elif ttype == T_Q3_K:  # hmask[32], qs[64], 12 bytes of 6-bit scales (offset 32), d
        blocks[:, 108:110] = f16(5.0e-4)
    elif ttype == T_Q6_K:  # ql[128], qh[64], int8 scales[16], d
        blocks[:, 192:208] &= 0x1F  # scales 0..31
        blocks[:, 208:210] = f16(8.0e-5)
    elif ttype == T_Q4_1:  # d, m, 16 bytes of nibbles
        blocks[:, 0:2] = f16(0.005)
        blocks[:, 2:4] = f16(-0.0375)
    elif ttype == T_Q4_0:
        blocks[:, 0:2] = f16(0.005)
    elif ttype == T_Q8_0:
        blocks[:, 0:2] = f16(0.0003)
    return b.tobytes()


def const_f32(value):
    def fill(ttype, nbytes, dims, pool):
        return np.full(nbytes // 4, value, dtype="<f4").tobytes()
    return fill


def normal_f32(std, seed, mean=0.0):
    def fill(ttype, nbytes, dims, pool):
        return (np.random.default_rng(seed).standard_normal(nbytes // 4) * std + mean).astype("<f4").tobytes()
    return fill


def uniform_f32(lo, hi, seed):
    def fill(ttype, nbytes, dims, pool):
        return np.random.default_rng(seed).uniform(lo, hi, nbytes // 4).astype("<f4").tobytes()
    return fill


SHAPES = {
    "smollm2-135m": dict(arch="llama", vocab=49152, embd=576, layers=30, heads=9, kv=3, hd=64, ff=1536, tied=True,
                         base=100000.0, eps=1e-5, t=T_Q4_1, t6=T_Q4_1, t_out=T_Q4_1, ctx=8192),
    "qwen3-1.7b": dict(arch="qwen3", vocab=151936, embd=2048, layers=28, heads=16, kv=8, hd=128, ff=6144, tied=True,
                       base=1000000.0, eps=1e-6, t=T_Q4_K, t6=T_Q6_K, t_out=T_Q6_K, ctx=40960, qk_norm=True),
    "llama3-8b": dict(arch="llama", vocab=128256, embd=4096, layers=32, heads=32, kv=8, hd=128, ff=14336,
                      tied=False, base=500000.0, eps=1e-5, t=T_Q4_K, t6=T_Q6_K, t_out=T_Q6_K, ctx=8192),
    "qwen35-9b": dict(arch="qwen35", vocab=248320, embd=4096, layers=32, heads=16, kv=4, hd=256, ff=12288,
                      tied=False, base=10000000.0, eps=1e-6, t=T_Q4_K, t6=T_Q6_K, t_out=T_Q6_K, ctx=262144,
                      rot=64, gdn=dict(hk=16, hv=32, dk=128, dv=128, conv=4)),
    "qwen35-35b-a3b": dict(arch="qwen35moe", vocab=248320, embd=2048, layers=40, heads=16, kv=2, hd=256, ff=0,
                           tied=False, base=10000000.0, eps=1e-6, t=T_Q4_K, t6=T_Q6_K, t_out=T_Q6_K, ctx=262144,
                           rot=64, gdn=dict(hk=16, hv=32, dk=128, dv=128, conv=4),
                           moe=dict(n=256, used=8, ff=512, shared=512)),
}


def build(shape, tok_kv, layers=None, mix="q4_k_m", vocab=None):
    s = dict(SHAPES[shape])
    if vocab:
        s["vocab"] = vocab
    if MIXES[mix] is not None and s["t"] == T_Q4_K:
        s["t"], s["t6"] = MIXES[mix]
    if layers:
        s["layers"] = layers
    a = s["arch"]
    w = Writer()
    w.s("general.architecture", a)
    w.s("general.name", f"random {shape}")
    w.u32("general.alignment", 32)
    p = a + "."
    w.u32(p + "context_length", s["ctx"])
    w.u32(p + "embedding_length", s["embd"])
    w.u32(p + "block_count", s["layers"])
    w.u32(p + "attention.head_count", s["heads"])
    w.u32(p + "attention.head_count_kv", s["kv"])
    w.u32(p + "attention.key_length", s["hd"])
    w.u32(p + "attention.value_length", s["hd"])
    if s["ff"]:
        w.u32(p + "feed_forward_length", s["ff"])
    w.f32(p + "attention.layer_norm_rms_epsilon", s["eps"])
    w.f32(p + "rope.freq_base", s["base"])
    w.u32(p + "rope.dimension_count", s.get("rot", s["hd"]))
    g = s.get("gdn")
    if g:
        w.u32(p + "ssm.conv_kernel", g["conv"])
        w.u32(p + "ssm.state_size", g["dk"])
        w.u32(p + "ssm.group_count", g["hk"])
        w.u32(p + "ssm.time_step_rank", g["hv"])
        w.u32(p + "ssm.inner_size", g["hv"] * g["dv"])
        w.u32(p + "full_attention_interval", 4)
        # Multimodal RoPE sections (Qwen3.5's mrope_section; text positions make it plain RoPE):
        # newer llama.cpp refuses a qwen35 / qwen35moe file without them.
        w.add(p + "rope.dimension_sections", ARR, (I32, [11, 11, 10, 0]))
    m = s.get("moe")
    if m:
        w.u32(p + "expert_count", m["n"])
        w.u32(p + "expert_used_count", m["used"])
        w.u32(p + "expert_feed_forward_length", m["ff"])
        w.u32(p + "expert_shared_feed_forward_length", m["shared"])
    # Tokenizer: the donor's, its vocabulary padded to the model's.
    V = s["vocab"]
    for key, t, v in tok_kv:
        if not key.startswith("tokenizer."):
            continue
        if key == "tokenizer.ggml.tokens":
            et, items = v
            items = list(items) + [f"<|hearth_unused_{i}|>".encode() for i in range(len(items), V)]
            v = (et, items[:V])
        elif key in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            et, items = v
            pad = 3 if key.endswith("token_type") else 0.0
            v = (et, (list(items) + [pad] * V)[:V])
        w.add(key, t, v)
    E, H, KV, D = s["embd"], s["heads"], s["kv"], s["hd"]
    t, t6 = s["t"], s["t6"]
    q = quant_random
    w.tensor("token_embd.weight", [E, V], t, q)
    w.tensor("output_norm.weight", [E], T_F32, const_f32(1.0))
    if not s["tied"]:
        w.tensor("output.weight", [E, V], s["t_out"], q)
    for l in range(s["layers"]):
        b = f"blk.{l}."
        w.tensor(b + "attn_norm.weight", [E], T_F32, const_f32(1.0))
        recurrent = g is not None and (l + 1) % 4 != 0
        if g is None:
            w.tensor(b + "attn_q.weight", [E, H * D], t, q)
            w.tensor(b + "attn_k.weight", [E, KV * D], t, q)
            w.tensor(b + "attn_v.weight", [E, KV * D], t6, q)
            w.tensor(b + "attn_output.weight", [H * D, E], t, q)
            if s.get("qk_norm"):
                w.tensor(b + "attn_q_norm.weight", [D], T_F32, const_f32(1.0))
                w.tensor(b + "attn_k_norm.weight", [D], T_F32, const_f32(1.0))
            w.tensor(b + "ffn_norm.weight", [E], T_F32, const_f32(1.0))
        elif recurrent:
            C = 2 * g["hk"] * g["dk"] + g["hv"] * g["dv"]
            VD = g["hv"] * g["dv"]
            w.tensor(b + "attn_qkv.weight", [E, C], t, q)
            w.tensor(b + "attn_gate.weight", [E, VD], t, q)
            w.tensor(b + "ssm_beta.weight", [E, g["hv"]], T_F32, normal_f32(0.02, l))
            w.tensor(b + "ssm_alpha.weight", [E, g["hv"]], T_F32, normal_f32(0.02, l + 1000))
            w.tensor(b + "ssm_out.weight", [VD, E], t, q)
            w.tensor(b + "ssm_conv1d.weight", [g["conv"], C], T_F32, normal_f32(0.1, l + 2000))
            w.tensor(b + "ssm_dt.bias", [g["hv"]], T_F32, const_f32(1.0))
            w.tensor(b + "ssm_a", [g["hv"]], T_F32, uniform_f32(-16.0, -1.0, l + 3000))
            w.tensor(b + "ssm_norm.weight", [g["dv"]], T_F32, const_f32(1.0))
        else:
            w.tensor(b + "attn_q.weight", [E, 2 * H * D], t, q)
            w.tensor(b + "attn_k.weight", [E, KV * D], t, q)
            w.tensor(b + "attn_v.weight", [E, KV * D], t6, q)
            w.tensor(b + "attn_output.weight", [H * D, E], t, q)
            w.tensor(b + "attn_q_norm.weight", [D], T_F32, const_f32(1.0))
            w.tensor(b + "attn_k_norm.weight", [D], T_F32, const_f32(1.0))
        if g is not None:
            w.tensor(b + "post_attention_norm.weight", [E], T_F32, const_f32(1.0))
        if m:
            w.tensor(b + "ffn_gate_inp.weight", [E, m["n"]], T_F32, normal_f32(0.02, l + 4000))
            w.tensor(b + "ffn_gate_exps.weight", [E, m["ff"], m["n"]], t, q)
            w.tensor(b + "ffn_up_exps.weight", [E, m["ff"], m["n"]], t, q)
            w.tensor(b + "ffn_down_exps.weight", [m["ff"], E, m["n"]], t6, q)
            w.tensor(b + "ffn_gate_shexp.weight", [E, m["shared"]], t, q)
            w.tensor(b + "ffn_up_shexp.weight", [E, m["shared"]], t, q)
            w.tensor(b + "ffn_down_shexp.weight", [m["shared"], E], t6, q)
            w.tensor(b + "ffn_gate_inp_shexp.weight", [E], T_F32, normal_f32(0.02, l + 5000))
        else:
            F = s["ff"]
            w.tensor(b + "ffn_gate.weight", [E, F], t, q)
            w.tensor(b + "ffn_up.weight", [E, F], t, q)
            w.tensor(b + "ffn_down.weight", [F, E], t6, q)
    return w


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES))
    ap.add_argument("--tokenizer", help="GGUF whose tokenizer.* metadata is used")
    ap.add_argument("--extract-tokenizer", metavar="SRC", help="write only SRC's tokenizer metadata to OUT")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, help="fewer blocks than the published shape (each block keeps its shape): "
                    "a machine with less memory can time per-layer work, e.g. qwen35-35b-a3b with 8 blocks, ~4.6 GB")
    ap.add_argument("--mix", choices=sorted(MIXES), default="q4_k_m",
                    help="q3_k_m: Q3_K for the bulk, Q4_K for attn_v / ffn_down (Q6_K output), as llama.cpp's Q3_K_M roughly")
    ap.add_argument("--vocab", type=int, help="another vocabulary size than the shape's (e.g. a small draft model "
                    "for a larger one: the same donor tokenizer padded to the same size gives the same vocabulary)")
    a = ap.parse_args()
    t0 = time.time()
    if a.extract_tokenizer:
        w = Writer()
        w.s("general.architecture", "tokenizer-only")
        for k, t, v in read_kv(a.extract_tokenizer):
            if k.startswith("tokenizer."):
                w.add(k, t, v)
        w.write(a.out, None)
        print(f"wrote {a.out}: tokenizer of {a.extract_tokenizer}")
        return
    if not a.shape or not a.tokenizer:
        ap.error("--shape and --tokenizer are needed")
    w = build(a.shape, read_kv(a.tokenizer), a.layers, a.mix, a.vocab)
    pool = Pool(256 << 20, a.seed)
    size = w.write(a.out, pool)
    print(f"wrote {a.out}: {a.shape}, {len(w.tensors)} tensors, {size / 2**30:.2f} GiB in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
