#!/usr/bin/env python3
"""Writes tests/data/vision/: small test images in every format decode_image reads, what
PIL decodes them to, and what transformers' Qwen2-VL image processor (the PIL one,
Qwen2VLImageProcessorPil) makes of them. Run it in a scratch venv with
transformers==5.17.0 pillow numpy (no torch needed):

    python3 scripts/gen_vision_fixtures.py [--out tests/data/vision]

Everything is drawn from fixed seeds, so a rerun with the same versions writes the same
files. manifest.json lists the images (expected RGB in <name>.rgb, raw 8-bit RGB rows),
the processor cases (pixel_values in <case>.f32, little-endian float32, and the grid),
PIL resize cases and smart_resize edge cases. See README.md there.

Decoded RGB, as Hearth defines it: PIL's Image.open, ImageOps.exif_transpose (as
transformers' load_image does), then an image with alpha or transparency is composited
over white (round((c * a + 255 * (255 - a)) / 255), as qwen-vl-utils' paste does),
others converted to RGB. 16-bit samples keep the high byte.
"""
import argparse
import hashlib
import io
import json
import math
import struct
import zlib
from pathlib import Path

import numpy as np
import PIL
from PIL import Image, ImageDraw, ImageOps, features


def drawing(w, h, seed, mode="RGB"):
    """Gradients, a few shapes and noise: every resampling path sees edges and texture."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([
        255 * x / max(w - 1, 1),
        255 * y / max(h - 1, 1),
        127 + 127 * np.sin((x + 2 * y) / 5.0),
    ], axis=-1)
    base += rng.normal(0, 12, size=base.shape)
    img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(img)
    d.ellipse([w // 5, h // 5, w // 2, h // 2 + 3], fill=(250, 30, 40), outline=(0, 0, 0))
    d.rectangle([w // 2, h // 3, w - 3, h - 4], outline=(20, 220, 60), width=2)
    d.line([0, h - 1, w - 1, 0], fill=(255, 255, 255), width=1)
    return img


def alpha_ramp(w, h, seed):
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = (255 * ((x + y) % 37) / 36.0).astype(np.int32)
    a[h // 3: h // 2, :] = 0
    a[:, : w // 6] = 255
    a = np.clip(a + rng.randint(-3, 4, size=a.shape), 0, 255)
    return a.astype(np.uint8)


def save(img, fmt, **kw):
    b = io.BytesIO()
    img.save(b, fmt, **kw)
    return b.getvalue()


def png_chunk(tag, data):
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)


def write_png(arr, color_type, bit_depth, interlace=False):
    """A PNG written by hand, for what PIL cannot save: 16-bit RGB, Adam7 interlacing."""
    h, w = arr.shape[:2]
    dtype = ">u2" if bit_depth == 16 else "u1"
    a = arr.astype(dtype).reshape(h, w, -1)
    raw = b""
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
    for (x0, y0, dx, dy) in (passes if interlace else [(0, 0, 1, 1)]):
        sub = a[y0::dy, x0::dx]
        if sub.shape[0] == 0 or sub.shape[1] == 0:
            continue
        for row in sub:
            raw += b"\x00" + row.tobytes()
    ihdr = struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(raw, 9))
            + png_chunk(b"IEND", b""))


def exif_with_orientation(o):
    ex = Image.Exif()
    ex[0x0112] = o
    return ex.tobytes()


def expected_rgb(data):
    """What Hearth's decode_image must give for these bytes (see the module docstring)."""
    im = Image.open(io.BytesIO(data))
    im.seek(0)
    im = ImageOps.exif_transpose(im)
    has_alpha = im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info
    if has_alpha:
        rgba = np.array(im.convert("RGBA")).astype(np.uint32)
        a = rgba[..., 3:4]
        x = rgba[..., :3] * a + 255 * (255 - a) + 128
        return (((x >> 8) + x) >> 8).astype(np.uint8)
    return np.array(im.convert("RGB"))


def build_images():
    """name -> encoded bytes; plus name -> expected RGB where PIL is not the reference."""
    imgs, override = {}, {}
    rgb64 = drawing(64, 48, 1)
    imgs["rgb_64x48.png"] = save(rgb64, "PNG")
    rgba = drawing(100, 70, 2).convert("RGBA")
    rgba.putalpha(Image.fromarray(alpha_ramp(100, 70, 3)))
    imgs["rgba_100x70.png"] = save(rgba, "PNG")
    pal = drawing(33, 200, 4).quantize(colors=50, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    imgs["palette_33x200.png"] = save(pal, "PNG", transparency=7)
    imgs["colorkey_30x22.png"] = save(drawing(30, 22, 29), "PNG", transparency=(250, 30, 40))
    imgs["palette4_25x17.png"] = save(drawing(25, 17, 30).quantize(colors=16, dither=Image.Dither.NONE), "PNG",
                                      bits=4)
    imgs["grey_300x20.png"] = save(drawing(300, 20, 5).convert("L"), "PNG")
    la = drawing(50, 40, 6).convert("L").convert("LA")
    la.putalpha(Image.fromarray(alpha_ramp(50, 40, 7)))
    imgs["grey_alpha_50x40.png"] = save(la, "PNG")
    imgs["bilevel_45x31.png"] = save(drawing(45, 31, 8).convert("1"), "PNG")
    rng = np.random.RandomState(9)
    rgb16 = (np.array(drawing(40, 30, 10)).astype(np.uint16) * 257 + rng.randint(0, 256, (30, 40, 3))).astype(np.uint16)
    imgs["rgb16_40x30.png"] = write_png(rgb16, 2, 16)
    override["rgb16_40x30.png"] = (rgb16 >> 8).astype(np.uint8)
    grey16 = (np.array(drawing(37, 29, 11).convert("L")).astype(np.uint16) * 257).astype(np.uint16)
    imgs["grey16_37x29.png"] = write_png(grey16, 0, 16)
    # PIL clamps 16-bit grey (mode I;16) to 255 when converting to RGB; Hearth keeps the high byte.
    override["grey16_37x29.png"] = np.repeat((grey16 >> 8).astype(np.uint8)[..., None], 3, axis=2)
    imgs["interlaced_51x23.png"] = write_png(np.array(drawing(51, 23, 12)), 2, 8, interlace=True)
    imgs["orient8_30x20.png"] = save(drawing(30, 20, 13), "PNG", exif=exif_with_orientation(8))
    imgs["tiny_19x13.png"] = save(drawing(19, 13, 14), "PNG")

    imgs["baseline_64x48.jpg"] = save(rgb64, "JPEG", quality=90)
    imgs["progressive_100x70.jpg"] = save(drawing(100, 70, 15), "JPEG", quality=85, progressive=True)
    imgs["grey_33x200.jpg"] = save(drawing(33, 200, 16).convert("L"), "JPEG", quality=90)
    imgs["cmyk_40x30.jpg"] = save(drawing(40, 30, 17).convert("CMYK"), "JPEG", quality=95)
    imgs["orient6_44x28.jpg"] = save(drawing(44, 28, 18), "JPEG", quality=90, exif=exif_with_orientation(6))
    imgs["large_200x150.jpg"] = save(drawing(200, 150, 19), "JPEG", quality=80, subsampling=0)

    imgs["lossy_100x70.webp"] = save(drawing(100, 70, 20), "WEBP", quality=80)
    wa = drawing(64, 48, 21).convert("RGBA")
    wa.putalpha(Image.fromarray(alpha_ramp(64, 48, 22)))
    imgs["lossless_alpha_64x48.webp"] = save(wa, "WEBP", lossless=True, exact=True)
    frames = [drawing(40, 32, 23), drawing(40, 32, 24)]
    imgs["animated_40x32.webp"] = save(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=100,
                                       quality=90)
    imgs["orient3_36x24.webp"] = save(drawing(36, 24, 25), "WEBP", lossless=True, exif=exif_with_orientation(3))

    g0 = drawing(48, 36, 26).quantize(colors=64, dither=Image.Dither.NONE)
    g1 = drawing(48, 36, 27).quantize(colors=64, dither=Image.Dither.NONE)
    imgs["animated_48x36.gif"] = save(g0, "GIF", save_all=True, append_images=[g1], duration=100, loop=0,
                                      transparency=5, disposal=2)
    imgs["interlaced_60x45.gif"] = save(drawing(60, 45, 28).quantize(colors=200, dither=Image.Dither.NONE), "GIF",
                                        interlace=True)
    return imgs, override


# Processor cases: (name, image, patch, merge, temporal, min_pixels, max_pixels, mean/std).
QWEN3 = ([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
CLIP = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
CASES = [
    ("down_rgb_64x48", "rgb_64x48.png", 16, 2, 2, 256, 2048, QWEN3),
    ("up_tiny_19x13", "tiny_19x13.png", 14, 2, 2, 3136, 8000, CLIP),
    ("wide_grey_300x20", "grey_300x20.png", 14, 2, 2, 784, 4000, CLIP),
    ("tall_palette_33x200", "palette_33x200.png", 16, 2, 2, 1024, 4096, QWEN3),
    ("odd_progressive_100x70", "progressive_100x70.jpg", 14, 2, 2, 3136, 8000, QWEN3),
    ("large_200x150", "large_200x150.jpg", 16, 2, 2, 1024, 6144, QWEN3),
    ("same_size_64x64", "rgb_64x48.png", 16, 2, 2, 4096, 4096, CLIP),
    ("alpha_webp_64x48", "lossless_alpha_64x48.webp", 8, 2, 1, 512, 1024, QWEN3),
]

# PIL BICUBIC resize of one image to sizes that shrink one side and grow the other.
RESIZES = [("rgb_64x48.png", w, h) for (w, h) in [(37, 61), (128, 20), (64, 30), (20, 48), (7, 5), (120, 90)]]

# smart_resize edge cases: (height, width, factor, min_pixels, max_pixels).
SMART = [
    (48, 64, 32, 256, 2048), (13, 19, 28, 3136, 8000), (20, 300, 28, 784, 6000), (70, 100, 28, 3136, 8000),
    (200, 1, 28, 56 * 56, 28 * 28 * 1280), (201, 1, 28, 56 * 56, 28 * 28 * 1280), (1, 200, 32, 65536, 16777216),
    (70, 100, 28, 56 * 56, 28 * 28 * 1280), (3000, 4000, 32, 65536, 16777216), (4000, 3000, 28, 3136, 12845056),
    (42, 42, 28, 1, 10 ** 9), (98, 70, 28, 1, 10 ** 9), (14, 14, 28, 1, 784), (1080, 1920, 32, 65536, 1048576),
    (10000, 60, 32, 65536, 16777216), (1, 1, 28, 3136, 12845056), (27, 5000, 16, 256, 4096),
]


# preprocessor_config.json contents, and what Qwen2VLImageProcessorPil.from_dict makes of them.
CONFIGS = [
    {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
     "image_processor_type": "Qwen2VLImageProcessor", "image_std": [0.5, 0.5, 0.5], "merge_size": 2, "patch_size": 16,
     "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 16777216, "shortest_edge": 65536},
     "temporal_patch_size": 2},
    {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
     "image_mean": CLIP[0], "image_std": CLIP[1], "image_processor_type": "Qwen2VLImageProcessor"},
    {"size": {"shortest_edge": 1000, "longest_edge": 50000}, "min_pixels": 2000, "max_pixels": 40000},
    {},
    {"do_normalize": False, "do_rescale": False, "patch_size": 16},
    {"rescale_factor": 0.5, "image_mean": [0.1, 0.2, 0.3], "image_std": [2.0, 3.0, 4.0], "merge_size": 4},
]


def resolve_config(cfg):
    """Each in a fresh interpreter: the processor's __init__ writes min_pixels / max_pixels
    into its class-level size dict, so one config would leak into the next."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, __file__, "--resolve", json.dumps(cfg)], check=True, capture_output=True,
                       text=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def resolve_config_here(cfg):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil
    p = Qwen2VLImageProcessorPil.from_dict(json.loads(json.dumps(cfg)))
    return {"patch_size": p.patch_size, "temporal_patch_size": p.temporal_patch_size, "merge_size": p.merge_size,
            "min_pixels": p.size["shortest_edge"], "max_pixels": p.size["longest_edge"],
            "image_mean": list(p.image_mean), "image_std": list(p.image_std), "rescale_factor": p.rescale_factor,
            "do_rescale": p.do_rescale, "do_normalize": p.do_normalize}


def smart_resize_ref(h, w, factor, lo, hi):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize
    try:
        return list(smart_resize(h, w, factor=factor, min_pixels=lo, max_pixels=hi))
    except ValueError:
        return None


def compare_fast(out):
    """transformers' default processor when torchvision is installed (Qwen2VLImageProcessor)
    against the committed PIL-processor values: resized pixels and pixel_values."""
    import torch
    import torchvision
    import transformers
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    print(f"torch {torch.__version__} torchvision {torchvision.__version__} transformers {transformers.__version__} "
          f"pillow {PIL.__version__}")
    manifest = json.loads((out / "manifest.json").read_text())
    sizes = {i["file"]: (i["height"], i["width"]) for i in manifest["images"]}
    for c in manifest["cases"]:
        h, w = sizes[c["image"]]
        rgb = np.frombuffer((out / (c["image"] + ".rgb")).read_bytes(), np.uint8).reshape(h, w, 3)
        proc = Qwen2VLImageProcessor(patch_size=c["patch_size"], merge_size=c["merge_size"],
                                     temporal_patch_size=c["temporal_patch_size"], min_pixels=c["min_pixels"],
                                     max_pixels=c["max_pixels"], image_mean=c["image_mean"], image_std=c["image_std"])
        res = proc(images=[Image.fromarray(rgb, "RGB")], return_tensors="np")
        fast = np.asarray(res["pixel_values"], np.float32)
        slow = np.frombuffer((out / (c["name"] + ".f32")).read_bytes(), "<f4").reshape(fast.shape)
        d = np.abs(fast - slow)
        # In units of one 8-bit step of the resized image (what a resize difference shows as).
        step = (1 / 255) / min(c["image_std"])
        print(f"{c['name']}: grid {[int(v) for v in res['image_grid_thw'][0]]} vs {c['grid_thw']}, "
              f"max |diff| {d.max():.6g} ({d.max() / step:.2f} steps), differing {np.mean(d > 0):.1%}, "
              f"above 1e-6: {np.mean(d > 1e-6):.1%}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests/data/vision"))
    ap.add_argument("--resolve", help=argparse.SUPPRESS)
    ap.add_argument("--compare-fast", action="store_true",
                    help="write nothing; print how the torchvision processor (needs torch) differs from the "
                         "PIL one on the committed cases")
    args = ap.parse_args()
    if args.compare_fast:
        compare_fast(Path(args.out))
        return
    if args.resolve is not None:
        print(json.dumps(resolve_config_here(json.loads(args.resolve))))
        return
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import transformers
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    imgs, override = build_images()
    manifest = {"versions": {"transformers": transformers.__version__, "pillow": PIL.__version__,
                             "numpy": np.__version__, "libjpeg_turbo": features.version("libjpeg_turbo"),
                             "libwebp": features.version("webp")},
                "images": [], "cases": [], "resizes": [], "smart_resize": [], "configs": []}
    decoded = {}
    for name, data in imgs.items():
        (out / name).write_bytes(data)
        rgb = override.get(name)
        if rgb is None:
            rgb = expected_rgb(data)
        else:
            # Where the expected pixels are written here, PIL's own decode still has to agree
            # on all but the documented 16-bit grey clamp.
            if name != "grey16_37x29.png":
                assert np.array_equal(expected_rgb(data), rgb), name
        rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
        decoded[name] = rgb
        (out / (name + ".rgb")).write_bytes(rgb.tobytes())
        manifest["images"].append({"file": name, "width": int(rgb.shape[1]), "height": int(rgb.shape[0]),
                                   "sha256": hashlib.sha256(rgb.tobytes()).hexdigest()})
    for (cname, img, p, m, t, lo, hi, (mean, std)) in CASES:
        proc = Qwen2VLImageProcessorPil(patch_size=p, merge_size=m, temporal_patch_size=t, min_pixels=lo,
                                        max_pixels=hi, image_mean=mean, image_std=std)
        res = proc(images=[Image.fromarray(decoded[img], "RGB")], return_tensors="np")
        pv = np.ascontiguousarray(res["pixel_values"], dtype="<f4")
        grid = [int(v) for v in res["image_grid_thw"][0]]
        (out / (cname + ".f32")).write_bytes(pv.tobytes())
        manifest["cases"].append({"name": cname, "image": img, "patch_size": p, "merge_size": m,
                                  "temporal_patch_size": t, "min_pixels": lo, "max_pixels": hi,
                                  "image_mean": mean, "image_std": std, "grid_thw": grid,
                                  "shape": list(pv.shape)})
    for (img, w, h) in RESIZES:
        r = np.array(Image.fromarray(decoded[img], "RGB").resize((w, h), Image.Resampling.BICUBIC))
        fname = f"resize_{Path(img).stem}_{w}x{h}.rgb"
        (out / fname).write_bytes(r.tobytes())
        manifest["resizes"].append({"image": img, "width": w, "height": h, "file": fname})
    for (h, w, f, lo, hi) in SMART:
        manifest["smart_resize"].append({"height": h, "width": w, "factor": f, "min_pixels": lo, "max_pixels": hi,
                                         "result": smart_resize_ref(h, w, f, lo, hi)})
    for cfg in CONFIGS:
        manifest["configs"].append({"json": cfg, "resolved": resolve_config(cfg)})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(f.stat().st_size for f in out.iterdir())
    print(f"wrote {len(list(out.iterdir()))} files, {total} bytes, to {out}")


if __name__ == "__main__":
    main()
