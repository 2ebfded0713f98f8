#!/usr/bin/env python3
"""Writes tests/data/quant/: golden (de)quantization results from ggml itself.

The reference is ggml's C code as shipped in the PyPI package llama-cpp-python
(lib/libggml-base.so), called through ctypes:
  - dequantization: the `to_float` of ggml_get_type_traits(type) (the plain C
    dequantize_row_* functions), applied to random blocks whose fp16 scale
    fields hold finite, sensible values;
  - quantization: ggml_quantize_chunk(type, ..., imatrix=NULL), which runs the
    reference quantize_row_*_ref functions; Q8_1 and Q8_K, which
    ggml_quantize_chunk does not handle, call quantize_row_q8_1_ref /
    quantize_row_q8_K_ref directly (and dequantize_row_q8_K for Q8_K);
  - f32 -> f16 / bf16 rounding: ggml_fp32_to_fp16_row / ggml_fp32_to_bf16_row_ref
    on edge cases and random bit patterns.

Before writing anything the script checks the ctypes view of struct
ggml_type_traits against src/format/ggml_types.cpp (name, block size, type size
of every type Hearth knows) and checks that to_float points at the exported
dequantize_row_* symbol, so a layout mismatch cannot go unnoticed.

Usage: python3 scripts/gen_quant_fixtures.py [--lib PATH] [--out DIR]
Deterministic: the same library gives the same bytes (fixed seed).

Fixture format (little-endian), one file per type and direction:
  <name>.dequant.bin / <name>.quant.bin:
    magic "HQF1", u32 ggml type id, u32 kind (0 = dequant, 1 = quant),
    u32 n_elements, u32 n_bytes, then n_bytes of blocks, then n_elements f32.
    kind 0: the f32 are ggml's dequantization of the blocks.
    kind 1: the blocks are ggml's quantization of the f32 (rows of 256).
  half.bin: magic "HQH1", u32 n, f32[n] inputs, u16[n] f16 bits, u16[n] bf16 bits.
"""

import argparse
import ctypes
import math
import os
import random
import re
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROW = 256  # elements per quantized row (a multiple of every block size)

# ggml type ids (ggml.h enum ggml_type)
T = dict(F32=0, F16=1, Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8, Q8_1=9, Q2_K=10, Q3_K=11,
         Q4_K=12, Q5_K=13, Q6_K=14, Q8_K=15, IQ4_NL=20, BF16=30, MXFP4=39)

# Byte offsets of the fp16 scale fields of each block (ggml-common.h).
HALF_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q8_1": [0, 2],
    "IQ4_NL": [0], "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2],
    "Q6_K": [208],
}
DEQUANT_TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
                 "Q5_K", "Q6_K", "Q8_K", "IQ4_NL", "MXFP4"]
QUANT_TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K",
               "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ4_NL", "MXFP4"]


class TypeTraits(ctypes.Structure):
    # struct ggml_type_traits (ggml.h)
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


ROW_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


def default_lib():
    import llama_cpp  # noqa: imported only to locate its bundled libraries
    return os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so")


def load(path):
    lib = ctypes.CDLL(path)
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_requires_imatrix.restype = ctypes.c_bool
    lib.ggml_quantize_requires_imatrix.argtypes = [ctypes.c_int]
    for fn in ("ggml_version", "ggml_commit"):
        getattr(lib, fn).restype = ctypes.c_char_p
    return lib


def symbol_addr(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def check_traits(lib):
    """Cross-checks the ctypes layout against Hearth's own type table."""
    src = open(os.path.join(ROOT, "src/format/ggml_types.cpp")).read()
    hdr = open(os.path.join(ROOT, "src/format/ggml_types.h")).read()
    ids = {m[0]: int(m[1]) for m in re.findall(r"\b(\w+) = (\d+)", hdr)}
    rows = re.findall(r'GgmlTypeTraits\{GgmlType::(\w+), "(\w+)", (\d+), (\d+)\}', src)
    if len(rows) < 20:
        sys.exit("could not parse src/format/ggml_types.cpp")
    for enum_name, name, blck, size in rows:
        tr = lib.ggml_get_type_traits(ids[enum_name]).contents
        got = (tr.type_name.decode(), tr.blck_size, tr.type_size)
        if got != (name, int(blck), int(size)):
            sys.exit(f"traits mismatch for {enum_name}: ggml {got}, hearth {(name, blck, size)}")
    for name, fn in [("Q4_0", "dequantize_row_q4_0"), ("Q4_K", "dequantize_row_q4_K"),
                     ("Q6_K", "dequantize_row_q6_K"), ("MXFP4", "dequantize_row_mxfp4")]:
        if lib.ggml_get_type_traits(T[name]).contents.to_float != symbol_addr(lib, fn):
            sys.exit(f"to_float of {name} is not {fn}: struct layout mismatch")
    if lib.ggml_get_type_traits(T["Q4_K"]).contents.from_float_ref != symbol_addr(lib, "quantize_row_q4_K_ref"):
        sys.exit("from_float_ref of q4_K is not quantize_row_q4_K_ref: struct layout mismatch")
    print(f"traits layout checked for {len(rows)} types")


def traits(lib, name):
    return lib.ggml_get_type_traits(T[name]).contents


def f16_bits(x):
    return struct.unpack("<H", struct.pack("<e", x))[0]


def random_scale(rng, k):
    """A finite fp16 scale: mostly 1e-4..10 with random sign, some edge values."""
    special = [0.0, 2.0 ** -24, 2.0 ** -14 * 0.75, -2.0 ** -20, 65504.0 / 4096, -1.0]
    if k < len(special) and rng.random() < 0.5:
        return special[k]
    return rng.choice([-1, 1]) * 10.0 ** rng.uniform(-4, 1)


def random_blocks(rng, name, n_blocks, size):
    data = bytearray(rng.getrandbits(8) for _ in range(n_blocks * size))
    for b in range(n_blocks):
        base = b * size
        if name in HALF_FIELDS:
            for k, off in enumerate(HALF_FIELDS[name]):
                v = random_scale(rng, b) if k == 0 else abs(random_scale(rng, b + 3))
                struct.pack_into("<H", data, base + off, f16_bits(v))
        elif name == "Q8_K":
            struct.pack_into("<f", data, base, rng.choice([-1, 1]) * 10.0 ** rng.uniform(-6, 0))
        elif name == "MXFP4":
            data[base] = [0, 1, 2, 127, 254][b] if b < 5 else rng.randint(100, 150)
    return bytes(data)


def write_fixture(out_dir, name, kind, n_elements, blocks, floats):
    suffix = "dequant" if kind == 0 else "quant"
    path = os.path.join(out_dir, f"{name.lower()}.{suffix}.bin")
    with open(path, "wb") as f:
        f.write(b"HQF1" + struct.pack("<IIII", T[name], kind, n_elements, len(blocks)))
        f.write(blocks)
        f.write(bytes(floats))
    return path


def gen_dequant(lib, rng, out_dir):
    for name in DEQUANT_TYPES:
        tr = traits(lib, name)
        n_blocks = {1: 512, 32: 16, 256: 4}[tr.blck_size]
        if name == "F16":  # every interesting class of value, NaN and inf included
            blocks = bytes(rng.getrandbits(8) for _ in range(2 * n_blocks))
            blocks = struct.pack("<8H", 0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x7bff, 0x7c00, 0xfe01) + blocks[16:]
        elif name == "BF16":
            blocks = bytes(rng.getrandbits(8) for _ in range(2 * n_blocks))
            blocks = struct.pack("<6H", 0x0000, 0x8000, 0x0001, 0x7f80, 0xffc1, 0x7f7f) + blocks[12:]
        else:
            blocks = random_blocks(rng, name, n_blocks, tr.type_size)
        n = n_blocks * tr.blck_size
        src = ctypes.create_string_buffer(blocks, len(blocks))
        dst = (ctypes.c_float * n)()
        fn_addr = tr.to_float if name != "Q8_K" else symbol_addr(lib, "dequantize_row_q8_K")
        if not fn_addr:
            sys.exit(f"ggml has no to_float for {name}")
        ROW_FN(fn_addr)(src, dst, n)
        write_fixture(out_dir, name, 0, n, blocks, dst)


def quant_rows(rng):
    """Rows of ROW floats with varied magnitudes, zeros, outliers and one-signed data."""
    g = rng.gauss
    rows = [
        [g(0, 1) for _ in range(ROW)],
        [0.0] * ROW,
        [g(0, 0.02) for _ in range(ROW)],
        [rng.uniform(0.5, 2.0) for _ in range(ROW)],
        [rng.uniform(-3.0, -1.0) for _ in range(ROW)],
        [g(0, 1e-3) for _ in range(ROW)],
        [g(0, 300.0) for _ in range(ROW)],
        [],
    ]
    for i in (5, 77, 200):  # outliers in the small-noise row
        rows[2][i] = rng.choice([-1, 1]) * rng.uniform(5, 20)
    mixed = rows[7]
    for blk in range(ROW // 32):  # per-32 blocks of very different kinds
        kind = blk % 4
        if kind == 0:
            mixed += [0.0] * 32
        elif kind == 1:
            mixed += [0.75] * 32
        else:
            s = 10.0 ** rng.uniform(-6, 2)
            mixed += [g(0, s) for _ in range(32)]
    return [struct.unpack("<f", struct.pack("<f", v))[0] for r in rows for v in r]


def gen_quant(lib, rng, out_dir):
    values = quant_rows(rng)
    n = len(values)
    nrows = n // ROW
    src = (ctypes.c_float * n)(*values)
    for name in QUANT_TYPES:
        tr = traits(lib, name)
        if lib.ggml_quantize_requires_imatrix(T[name]):
            sys.exit(f"{name} needs an imatrix")
        n_bytes = n // tr.blck_size * tr.type_size
        dst = ctypes.create_string_buffer(n_bytes)
        if name in ("Q8_1", "Q8_K"):  # not handled by ggml_quantize_chunk
            fn = {"Q8_1": "quantize_row_q8_1_ref", "Q8_K": "quantize_row_q8_K_ref"}[name]
            ROW_FN(symbol_addr(lib, fn))(src, dst, n)
        else:
            got = lib.ggml_quantize_chunk(T[name], src, dst, 0, nrows, ROW, None)
            if got != n_bytes:
                sys.exit(f"ggml_quantize_chunk({name}) wrote {got} bytes, expected {n_bytes}")
        write_fixture(out_dir, name, 1, n, dst.raw, src)


def half_inputs(rng):
    vals = []
    def add_bits(b):
        vals.append(b & 0xFFFFFFFF)
    # around every 37th f16 value: the value +-1 f32 ulp, the exact midpoint to the
    # next f16 value +-1 ulp (ties round to even), the next value - 1 ulp
    def f32_of_f16(h):
        if h == 0x7c00:
            return 65536.0  # one step past the largest f16: its midpoint is the overflow tie
        return struct.unpack("<e", struct.pack("<H", h))[0]
    def bits_of(x):
        return struct.unpack("<I", struct.pack("<f", x))[0]
    for h in list(range(0, 0x7c00, 37)) + [0x0001, 0x0002, 0x03ff, 0x0400, 0x7bfe, 0x7bff]:
        lo, hi = f32_of_f16(h), f32_of_f16(h + 1)
        mid = bits_of((lo + hi) / 2)  # exact: f32 has 13 more mantissa bits than f16
        for b in (bits_of(lo), bits_of(lo) + 1, bits_of(hi) - 1, mid - 1, mid, mid + 1):
            add_bits(b)
    # overflow, underflow, NaN payloads, f32 subnormals, both signs
    specials = [0x477fefff, 0x477ff000, 0x477ff001, 0x47800000, 0x7f7fffff, 0x7f800000, 0x7f800001,
                0x7fc00000, 0x7fffffff, 0x7f801234, 0x00000001, 0x007fffff, 0x00800000, 0x33000000,
                0x33000001, 0x32ffffff, 0x33800000, 0x33c00000, 0x387fc000, 0x387fe000, 0x387fffff,
                0x38800000, 0x3f800000, 0x3f801000, 0x3f803000, 0x3f800fff, 0x3f801001, 0x3f7fffff,
                0x3effffff, 0x7f7f8000, 0x7f7f7fff, 0x7f7fffff, 0x3f808000, 0x3f818000, 0x3f817fff]
    for b in specials:
        add_bits(b)
    vals = vals + [v | 0x80000000 for v in vals]
    vals += [rng.getrandbits(32) for _ in range(2000)]
    return vals


def gen_half(lib, rng, out_dir):
    bits = half_inputs(rng)
    n = len(bits)
    src = (ctypes.c_uint32 * n)(*bits)
    f16 = (ctypes.c_uint16 * n)()
    bf16 = (ctypes.c_uint16 * n)()
    bf16b = (ctypes.c_uint16 * n)()
    lib.ggml_fp32_to_fp16_row(src, f16, ctypes.c_int64(n))
    lib.ggml_fp32_to_bf16_row_ref(src, bf16, ctypes.c_int64(n))
    lib.ggml_fp32_to_bf16_row(src, bf16b, ctypes.c_int64(n))
    if list(bf16) != list(bf16b):
        sys.exit("ggml_fp32_to_bf16_row and _row_ref disagree")
    # ggml's f16 -> f32 must be exact IEEE, except that a signalling NaN comes back
    # quiet (its float multiply sets the quiet bit); the unit test relies on this.
    all_h = (ctypes.c_uint16 * 65536)(*range(65536))
    back = (ctypes.c_uint32 * 65536)()
    lib.ggml_fp16_to_fp32_row(all_h, back, ctypes.c_int64(65536))
    for h in range(65536):
        v = struct.unpack("<e", struct.pack("<H", h))[0]
        if math.isnan(v):
            want = 0x7fc00000 | ((h & 0x8000) << 16) | ((h & 0x3ff) << 13)
        else:
            want = struct.unpack("<I", struct.pack("<f", v))[0]
        if back[h] != want:
            sys.exit(f"ggml f16 -> f32 of {h:#06x} gives {back[h]:#010x}, IEEE {want:#010x}")
    with open(os.path.join(out_dir, "half.bin"), "wb") as f:
        f.write(b"HQH1" + struct.pack("<I", n))
        f.write(bytes(src))
        f.write(bytes(f16))
        f.write(bytes(bf16))
    print(f"half.bin: {n} f32 -> f16/bf16 cases")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=None, help="libggml-base.so (default: llama-cpp-python's)")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/quant"))
    args = ap.parse_args()
    lib = load(args.lib or default_lib())
    print(f"ggml {lib.ggml_version().decode()} ({lib.ggml_commit().decode()})")
    check_traits(lib)
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(20250101)
    gen_dequant(lib, rng, args.out)
    gen_quant(lib, rng, args.out)
    gen_half(lib, rng, args.out)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"wrote {args.out} ({total} bytes)")


if __name__ == "__main__":
    main()
