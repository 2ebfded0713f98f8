"""Helpers for the image tests of the agent and the bench: the tiny random Qwen3.5 with a
vision tower (benchmarks/make_qwen35_model.py; its answers are noise, only the mechanics can
be checked) and PNG files written with the standard library."""
import pathlib
import struct
import subprocess
import sys
import zlib

REPO = pathlib.Path(__file__).resolve().parents[2]


def make_tiny_vision_model(out, shared_dir):
    subprocess.run([sys.executable, str(REPO / "benchmarks/make_qwen35_model.py"), str(out),
                    "--shared", str(shared_dir / "data"),
                    "--hidden", "64", "--layers", "4", "--intermediate", "128", "--heads", "2",
                    "--kv-heads", "1", "--head-dim", "32", "--linear-key-heads", "2",
                    "--linear-key-dim", "16", "--linear-value-dim", "16", "--dtype", "f32",
                    "--std", "0.5", "--seed", "3", "--vision-depth", "2", "--vision-hidden", "32"],
                   check=True, capture_output=True, text=True, timeout=300)
    return out


def png_bytes(width, height, pixel=lambda x, y: (x * 7 % 256, y * 5 % 256, (x + y) % 256)):
    """An 8-bit RGB PNG: a window-like picture by default (any pixel function may be given)."""
    raw = b"".join(b"\x00" + bytes(c for x in range(width) for c in pixel(x, y)) for y in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
