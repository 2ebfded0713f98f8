"""Models found in the users' stores: a Hugging Face hub cache and an Ollama store built in a
temporary folder around the default model (symbolic links, nothing copied), used through
`-m ORG/NAME:QUANT` and `-m NAME:TAG`, listed by `hearth list`, served by `hearth serve`."""
import hashlib
import json
import os
import pathlib
import subprocess

import pytest
import requests

from serve_util import Server

PROMPT = ["-p", "hi", "-n", "4", "--temp", "0"]


@pytest.fixture
def stores(tmp_path, default_model):
    """HF_HUB_CACHE with org/smol (two revisions, refs/main -> the second, two quants in it) and
    org/one (one GGUF); OLLAMA_MODELS with smol:latest; LM Studio's folder empty."""
    real = os.path.realpath(default_model)
    hub = tmp_path / "hub"
    repo = hub / "models--org--smol"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "q41").symlink_to(real)
    (repo / "blobs" / "q80").symlink_to(real)  # a second "quant" (the same bytes, another name)
    for rev, files in {"1111": {"smol-Q8_0.gguf": "q80"},
                       "2222": {"smol-Q4_1.gguf": "q41", "smol-Q8_0.gguf": "q80"}}.items():
        (repo / "snapshots" / rev).mkdir(parents=True)
        for name, blob in files.items():
            (repo / "snapshots" / rev / name).symlink_to(f"../../blobs/{blob}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("2222")
    one = hub / "models--org--one"  # a repo with a single GGUF: ORG/NAME alone picks it
    (one / "snapshots" / "3333").mkdir(parents=True)
    (one / "snapshots" / "3333" / "one.Q4_1.gguf").symlink_to(real)
    (one / "refs").mkdir()
    (one / "refs" / "main").write_text("3333\n")
    ollama = tmp_path / "ollama"
    digest = hashlib.sha256(open(real, "rb").read()).hexdigest()
    (ollama / "blobs").mkdir(parents=True)
    (ollama / "blobs" / f"sha256-{digest}").symlink_to(real)
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "smol" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 1}]}))
    env = dict(os.environ, HF_HUB_CACHE=str(hub), OLLAMA_MODELS=str(ollama),
               LMSTUDIO_MODELS_DIR=str(tmp_path / "lmstudio"))
    return {"env": env, "hub": hub, "ollama": ollama, "real": real}


def hearth(hearth_bin, stores, *args):
    return subprocess.run([str(hearth_bin), *map(str, args)], capture_output=True, text=True, timeout=60,
                          env=stores["env"])


def test_store_names_run_like_the_path(hearth_bin, default_model, stores):
    want = hearth(hearth_bin, stores, "run", "-m", default_model, *PROMPT)
    assert want.returncode == 0, want.stderr
    for ref, where in [("org/smol:Q4_1", "models--org--smol/snapshots/2222/smol-Q4_1.gguf"),
                       ("smol", "blobs/sha256-")]:
        got = hearth(hearth_bin, stores, "run", "-m", ref, *PROMPT)
        assert got.returncode == 0, got.stderr
        assert got.stdout == want.stdout, ref
        assert where in got.stderr, got.stderr  # the log line names the file used


def test_inspect_and_tokenize_take_store_names(hearth_bin, default_model, stores):
    want = hearth(hearth_bin, stores, "tokenize", "-m", default_model, "Hello stores")
    got = hearth(hearth_bin, stores, "tokenize", "-m", "smol:latest", "Hello stores")
    assert want.returncode == 0 and got.returncode == 0, got.stderr
    assert got.stdout == want.stdout
    info = hearth(hearth_bin, stores, "inspect", "org/one")
    assert info.returncode == 0, info.stderr
    assert "architecture:   llama" in info.stdout


def test_list_json_and_table(hearth_bin, stores):
    r = hearth(hearth_bin, stores, "list", "--json")
    assert r.returncode == 0, r.stderr
    by_name = {m["name"]: m for m in json.loads(r.stdout)}
    assert set(by_name) == {"org/one", "org/smol:Q4_1", "org/smol:Q8_0", "smol:latest"}
    size = os.path.getsize(stores["real"])
    for m in by_name.values():
        assert m["architecture"] == "llama" and m["quantization"] == "Q4_1", m
        assert m["size_bytes"] == size and m["parameters"] > 100_000_000 and m["context_length"] > 0, m
        assert "error" not in m
    assert by_name["smol:latest"]["store"] == "ollama"
    assert by_name["org/smol:Q4_1"]["store"] == "huggingface"
    table = hearth(hearth_bin, stores, "list")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "STORE", "ARCH", "PARAMS", "QUANT", "SIZE", "CONTEXT", "PATH"]
    assert len(lines) == 5 and all("llama" in line for line in lines[1:])
    assert len({line.index("huggingface" if "org/" in line else "ollama") for line in lines[1:]}) == 1  # aligned


def test_broken_store_entry_is_listed_with_its_error(hearth_bin, stores):
    bad = stores["ollama"] / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    r = hearth(hearth_bin, stores, "list", "--json")
    assert r.returncode == 0, r.stderr
    broken = [m for m in json.loads(r.stdout) if m["name"] == "broken:latest"]
    assert len(broken) == 1 and "not valid JSON" in broken[0]["error"]


def test_ambiguous_and_missing_names(hearth_bin, stores):
    amb = hearth(hearth_bin, stores, "run", "-m", "org/smol", *PROMPT)
    assert amb.returncode != 0 and "add :QUANT, one of: Q4_1, Q8_0" in amb.stderr, amb.stderr
    missing = hearth(hearth_bin, stores, "run", "-m", "org/smoll:Q4_1", *PROMPT)
    assert missing.returncode != 0
    assert str(stores["hub"]) in missing.stderr and str(stores["ollama"]) in missing.stderr, missing.stderr
    assert "close matches: org/smol:Q4_1" in missing.stderr, missing.stderr


def test_serve_a_hub_name(hearth_bin, stores, monkeypatch):
    for key in ("HF_HUB_CACHE", "OLLAMA_MODELS", "LMSTUDIO_MODELS_DIR"):
        monkeypatch.setenv(key, stores["env"][key])
    server = Server(hearth_bin, "org/one", "--max-seqs", "1")
    try:
        base = f"http://{server.host}:{server.port}"
        models = requests.get(f"{base}/v1/models", timeout=10).json()
        assert models["data"][0]["id"] == "org/one"
        r = requests.post(f"{base}/v1/chat/completions", timeout=60, json={
            "model": "org/one", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"]
    finally:
        assert server.stop()[0] == 0


def test_safetensors_repo_in_the_hub_cache(hearth_bin, stores):
    """A repo of config.json + safetensors (links into blobs/) is an HF folder: converted in memory."""
    src = pathlib.Path(__file__).resolve().parents[1] / "data" / "qwen35" / "dense"
    repo = stores["hub"] / "models--org--dense"
    (repo / "snapshots" / "4444").mkdir(parents=True)
    (repo / "blobs").mkdir()
    for f in src.iterdir():
        (repo / "blobs" / f.name).symlink_to(f)
        (repo / "snapshots" / "4444" / f.name).symlink_to(f"../../blobs/{f.name}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("4444")
    r = hearth(hearth_bin, stores, "inspect", "org/dense", "--tensors")
    assert r.returncode == 0, r.stderr
    assert "blk.0.ssm_conv1d.weight" in r.stdout
    listed = {m["name"]: m for m in json.loads(hearth(hearth_bin, stores, "list", "--json").stdout)}
    dense = listed["org/dense"]
    assert dense["format"] == "safetensors" and dense["architecture"] == "qwen3_5_text", dense
    assert dense["parameters"] > 0 and dense["size_bytes"] >= (src / "model.safetensors").stat().st_size
