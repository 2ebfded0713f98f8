"""`hearth bench --scenario image` end to end against `hearth serve` of a tiny random Qwen3.5 with
a vision tower: generated square PNGs (and --image FILE) with a ~50-word question, streamed
through the OpenAI chat API; the prompt tokens the server reports include the image's tokens
(the tiny model's processor: 16-pixel patches merged 2x2, at most 65536 pixels), TTFT median
and p90 are reported. Against the text-only default model the scenario fails with the server's
"takes text only" error."""
import json
import subprocess

import pytest

from serve_util import Server
from vision_util import make_tiny_vision_model, png_bytes


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory, hearth_bin, shared_dir):
    model = make_tiny_vision_model(tmp_path_factory.mktemp("tinyv") / "hf", shared_dir)
    srv = Server(hearth_bin, model, "--threads", "2", "--ctx", "1024")
    yield srv
    rc, _ = srv.stop(timeout=8)
    assert rc == 0, srv.stderr()[-3000:]


def bench(hearth_bin, url, out, *args, reps=3):
    p = subprocess.run([str(hearth_bin), "bench", "--target", f"h={url}", "--scenario", "image", "--reps", str(reps),
                        "--max-tokens", "4", "--out", str(out), *map(str, args)],
                       capture_output=True, text=True, timeout=300)
    return p, (json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else None)


def image_samples(res):
    return sorted((s for s in res["samples"] if s["scenario"] == "image"), key=lambda s: s["rep"])


def test_image_scenario_counts_the_image_tokens(hearth_bin, vision_server, tmp_path):
    p256, r256 = bench(hearth_bin, vision_server.url, tmp_path / "a", "--image-size", 256)
    assert p256.returncode == 0, p256.stderr
    p128, r128 = bench(hearth_bin, vision_server.url, tmp_path / "b", "--image-size", 128)
    assert p128.returncode == 0, p128.stderr
    (row,) = [r for r in r256["summary"] if r["scenario"] == "image"]
    assert row["x"] == 256 and row["requests"] == 3 and row["failed"] == 0, row
    m = row["metrics"]
    assert 0 < m["ttft_ms"]["median"] <= m["ttft_p90_ms"]["median"] <= m["ttft_ms"]["max"], m
    assert m["ttft_p90_ms"]["n"] == 3
    # The same questions (seeded by repetition, not by size): the difference is the image.
    # 256x256 -> 16x16 patches -> 8x8 = 64 tokens; 128x128 -> 8x8 patches -> 16 tokens.
    a, b = image_samples(r256), image_samples(r128)
    assert [s["prompt_words"] for s in a] == [50, 50, 50]
    for sa, sb in zip(a, b):
        assert sa["ok"] and sb["ok"], (sa, sb)
        assert sa["prompt_tokens"] - sb["prompt_tokens"] == 64 - 16, (sa, sb)
        assert sb["prompt_tokens"] > 16 + 50  # the image and a ~50-word question
        assert sa["cached_tokens"] < 32  # a new picture and question per repetition: no cache hit past the head
    assert "image 256x256 + 50-word question: TTFT median" in p256.stdout, p256.stdout
    report = (tmp_path / "a" / "report.md").read_text()
    assert "## Image + question: time to first token (`image`)" in report and "TTFT p90 ms" in report

    # --image FILE: a 64x64 PNG (the processor's minimum, 4096 pixels) -> 2x2 = 4 tokens.
    f = tmp_path / "shot.png"
    f.write_bytes(png_bytes(64, 64))
    pf, rf = bench(hearth_bin, vision_server.url, tmp_path / "c", "--image", f)
    assert pf.returncode == 0, pf.stderr
    for sf, sb in zip(image_samples(rf), b):
        assert sf["ok"] and sf["x"] == 0 and sb["prompt_tokens"] - sf["prompt_tokens"] == 16 - 4, (sf, sb)
    assert f"image {f} + 50-word question" in pf.stdout


def test_image_scenario_options_and_text_only_server(hearth_bin, default_model, tmp_path):
    def run(*args):
        return subprocess.run([str(hearth_bin), "bench", "--target", "h=http://127.0.0.1:9", "--out",
                               str(tmp_path / "o"), *map(str, args)], capture_output=True, text=True, timeout=30)

    p = run("--scenario", "image", "--image-size", 8)
    assert p.returncode == 2 and "--image-size must be in [16, 8192]" in p.stderr, p.stderr
    notes = tmp_path / "notes.txt"
    notes.write_text("not a picture")
    p = run("--scenario", "image", "--image", notes)
    assert p.returncode == 2 and f"--image: '{notes}' is not a PNG, JPEG, WebP or GIF image" in p.stderr, p.stderr
    p = run("--image", notes.with_name("missing.png"), "--scenario", "image")
    assert p.returncode == 2 and "--image: cannot open" in p.stderr, p.stderr

    srv = Server(hearth_bin, default_model, "--threads", "2")
    try:
        p, res = bench(hearth_bin, srv.url, tmp_path / "t", "--image-size", 64, reps=1)
    finally:
        srv.stop(timeout=8)
    assert p.returncode == 0, p.stderr  # the target ran; its image requests failed
    (row,) = [r for r in res["summary"] if r["scenario"] == "image"]
    assert row["failed"] == 1 and "takes text only (no vision encoder)" in row["errors"][0], row
