"""`hearth pull` against a local fake hub (tests/e2e/fake_hub.py, never the internet): the hub
cache layout (blobs named by sha256, snapshot links, refs/main), `hearth list` and `hearth run`
from it, a resumed download (Range), a corrupted download refused, a gated repo with and
without HF_TOKEN, quant errors, an HF-format repo's needed files only, then `hearth rm`."""
import os
import subprocess

import pytest

from fake_hub import COMMIT, FakeHub

PROMPT = ["-p", "hi", "-n", "4", "--temp", "0"]


@pytest.fixture
def hub(default_model, tmp_path):
    safet = b"\x18\0\0\0\0\0\0\0" + b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    h = FakeHub({
        "org/tiny-GGUF": {"tiny-Q4_1.gguf": default_model, "tiny-Q8_0.gguf": b"GGUF-q8-not-pulled",
                          "mmproj-tiny-f16.gguf": b"projector bytes", "README.md": b"# tiny\n"},
        "org/tiny-hf": {"config.json": b'{"model_type":"llama"}', "tokenizer.json": b"{}",
                        "model.safetensors": safet, "README.md": b"# hf\n", "train.bin": b"x" * 100},
        "org/gated": {"gated-Q4_1.gguf": b"gated bytes"},
    })
    h.gated.add("org/gated")
    yield h
    h.stop()


def hearth(hearth_bin, hub, tmp_path, *args, token=None):
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(tmp_path / "cache"),
               OLLAMA_MODELS=str(tmp_path / "ollama"), LMSTUDIO_MODELS_DIR=str(tmp_path / "lms"))
    env.pop("HF_TOKEN", None)
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run([str(hearth_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_pull_lays_out_the_cache_and_runs(hearth_bin, default_model, hub, tmp_path):
    got = hearth(hearth_bin, hub, tmp_path, "pull", "org/tiny-GGUF:Q4_1")
    assert got.returncode == 0, got.stderr
    repo = tmp_path / "cache" / "models--org--tiny-GGUF"
    assert (repo / "refs" / "main").read_text() == COMMIT
    snap = repo / "snapshots" / COMMIT
    assert sorted(os.listdir(snap)) == ["mmproj-tiny-f16.gguf", "tiny-Q4_1.gguf"]
    link = os.readlink(snap / "tiny-Q4_1.gguf")
    assert link.startswith("../../blobs/") and len(os.path.basename(link)) == 64
    assert open(snap / "tiny-Q4_1.gguf", "rb").read() == open(default_model, "rb").read()
    assert not [f for f in os.listdir(repo / "blobs") if f.endswith(".incomplete")]

    listed = hearth(hearth_bin, hub, tmp_path, "list")
    assert "org/tiny-GGUF" in listed.stdout, listed.stdout + listed.stderr
    want = subprocess.run([str(hearth_bin), "run", "-m", default_model, *PROMPT], capture_output=True,
                          text=True, timeout=120)
    run = hearth(hearth_bin, hub, tmp_path, "run", "-m", "org/tiny-GGUF:Q4_1", *PROMPT)
    assert run.returncode == 0, run.stderr
    assert run.stdout == want.stdout

    # Pulled again: nothing is downloaded.
    n = len(hub.requests)
    again = hearth(hearth_bin, hub, tmp_path, "pull", "org/tiny-GGUF:Q4_1")
    assert again.returncode == 0, again.stderr
    assert [p for p, _ in hub.requests[n:] if "/resolve/" in p] == []

    # rm: asks, then removes the repo (its only snapshot).
    rm = hearth(hearth_bin, hub, tmp_path, "rm", "org/tiny-GGUF", "--yes")
    assert rm.returncode == 0, rm.stderr
    assert not repo.exists()


def test_interrupted_pull_resumes_with_a_range_request(hearth_bin, default_model, hub, tmp_path):
    hub.drop_once.add("tiny-Q4_1.gguf")
    first = hearth(hearth_bin, hub, tmp_path, "pull", "org/tiny-GGUF:Q4_1")
    assert first.returncode != 0
    assert "pull again to resume" in first.stderr, first.stderr
    blobs = tmp_path / "cache" / "models--org--tiny-GGUF" / "blobs"
    assert [f for f in os.listdir(blobs) if f.endswith(".incomplete")]
    second = hearth(hearth_bin, hub, tmp_path, "pull", "org/tiny-GGUF:Q4_1")
    assert second.returncode == 0, second.stderr
    ranges = [r for p, r in hub.requests if p.endswith("tiny-Q4_1.gguf") and r]
    assert ranges and ranges[0] != "bytes=0-", hub.requests
    snap = tmp_path / "cache" / "models--org--tiny-GGUF" / "snapshots" / COMMIT
    assert open(snap / "tiny-Q4_1.gguf", "rb").read() == open(default_model, "rb").read()


def test_corrupted_download_fails_verification(hearth_bin, hub, tmp_path):
    hub.corrupt.add("tiny-Q4_1.gguf")
    got = hearth(hearth_bin, hub, tmp_path, "pull", "org/tiny-GGUF:Q4_1")
    assert got.returncode != 0
    assert "tiny-Q4_1.gguf: sha256" in got.stderr and "is not the hub's" in got.stderr, got.stderr
    blobs = tmp_path / "cache" / "models--org--tiny-GGUF" / "blobs"
    assert not [f for f in os.listdir(blobs) if f.endswith(".incomplete")]


def test_gated_repo_needs_hf_token(hearth_bin, hub, tmp_path):
    got = hearth(hearth_bin, hub, tmp_path, "pull", "org/gated")
    assert got.returncode != 0 and "HF_TOKEN" in got.stderr and "401" in got.stderr, got.stderr
    got = hearth(hearth_bin, hub, tmp_path, "pull", "org/gated", token="hf_secret")
    assert got.returncode == 0, got.stderr


def test_quant_errors_and_hf_repo(hearth_bin, hub, tmp_path):
    got = hearth(hearth_bin, hub, tmp_path, "pull", "org/tiny-GGUF:Q5_K_M")
    assert got.returncode != 0 and "no GGUF with quant 'Q5_K_M' (found: Q4_1, Q8_0)" in got.stderr, got.stderr
    got = hearth(hearth_bin, hub, tmp_path, "pull", "org/tiny-GGUF")
    assert got.returncode != 0 and "add :QUANT, one of: Q4_1, Q8_0" in got.stderr, got.stderr
    got = hearth(hearth_bin, hub, tmp_path, "pull", "org/missing")
    assert got.returncode != 0 and "not found" in got.stderr, got.stderr
    got = hearth(hearth_bin, hub, tmp_path, "pull", "org/tiny-hf")
    assert got.returncode == 0, got.stderr
    snap = tmp_path / "cache" / "models--org--tiny-hf" / "snapshots" / COMMIT
    assert sorted(os.listdir(snap)) == ["config.json", "model.safetensors", "tokenizer.json"]
