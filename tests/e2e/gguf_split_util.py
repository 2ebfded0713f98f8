"""Splits a GGUF into shards the way llama.cpp's gguf-split lays them out: shard k is a GGUF
holding a run of the tensors with split.no (u16, 0-based), split.count (u16) and
split.tensors.count (i32, the model's total); the first shard also holds every metadata key.
Used by the e2e tests to build split models from the default model; the metadata values are
copied as raw bytes (their encoding is parsed only to find where each ends)."""
import struct

_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes


def _skip_value(buf, pos, vtype):
    if vtype in _FIXED:
        return pos + _FIXED[vtype]
    if vtype == 8:  # string
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == 9:  # array
        etype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if etype in _FIXED:
            return pos + count * _FIXED[etype]
        for _ in range(count):
            pos = _skip_value(buf, pos, etype)
        return pos
    raise ValueError(f"unknown GGUF value type {vtype}")


def _string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def split_gguf(src, out_stem, n_shards):
    """Writes OUT_STEM-0000k-of-0000n.gguf for k = 1..n and returns their paths in order."""
    buf = open(src, "rb").read()
    assert buf[:4] == b"GGUF"
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    pos = 24
    kvs, alignment = [], 32
    for _ in range(n_kv):
        start = pos
        (klen,) = struct.unpack_from("<Q", buf, pos)
        key = buf[pos + 8:pos + 8 + klen].decode()
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", buf, pos)
        if key == "general.alignment":
            (alignment,) = struct.unpack_from("<I", buf, pos + 4)
        pos = _skip_value(buf, pos + 4, vtype)
        kvs.append(buf[start:pos])
    tensors = []
    for _ in range(n_tensors):
        (nlen,) = struct.unpack_from("<Q", buf, pos)
        name = buf[pos + 8:pos + 8 + nlen]
        pos += 8 + nlen
        (n_dims,) = struct.unpack_from("<I", buf, pos)
        dims = buf[pos + 4:pos + 4 + 8 * n_dims]
        pos += 4 + 8 * n_dims
        ttype, offset = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        tensors.append([name, n_dims, dims, ttype, offset])
    data = (pos + alignment - 1) // alignment * alignment
    starts = sorted(t[4] for t in tensors)
    ends = starts[1:] + [len(buf) - data]
    size_of = {s: e - s for s, e in zip(starts, ends)}  # bytes up to the next tensor (its padding included)
    paths = []
    per = (n_tensors + n_shards - 1) // n_shards
    for k in range(n_shards):
        part = tensors[k * per:(k + 1) * per]
        meta = list(kvs) if k == 0 else []
        meta.append(_string("split.no") + struct.pack("<IH", 2, k))
        meta.append(_string("split.count") + struct.pack("<IH", 2, n_shards))
        meta.append(_string("split.tensors.count") + struct.pack("<Ii", 5, n_tensors))
        head = b"GGUF" + struct.pack("<IQQ", version, len(part), len(meta)) + b"".join(meta)
        body, infos, at = [], [], 0
        for name, n_dims, dims, ttype, offset in part:
            chunk = buf[data + offset:data + offset + size_of[offset]]
            infos.append(struct.pack("<Q", len(name)) + name + struct.pack("<I", n_dims) + dims
                         + struct.pack("<IQ", ttype, at))
            body += [chunk, b"\0" * (-len(chunk) % alignment)]
            at += len(chunk) + (-len(chunk) % alignment)
        head += b"".join(infos)
        head += b"\0" * (-len(head) % alignment)
        path = f"{out_stem}-{k + 1:05d}-of-{n_shards:05d}.gguf"
        with open(path, "wb") as f:
            f.write(head)
            for b in body:
                f.write(b)
        paths.append(path)
    return paths
