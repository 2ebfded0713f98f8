"""`hearth rm`: a hub cache with a repo of two snapshots sharing a blob, built in a temporary
folder; rm of the main snapshot keeps the shared blob and the other snapshot, rm of the last
one removes the repo folder; no --yes asks, and a "no" removes nothing; Ollama names and
paths are refused naming the tool that removes them."""
import hashlib
import json
import os
import subprocess

import pytest


@pytest.fixture
def cache(tmp_path):
    hub = tmp_path / "hub"
    repo = hub / "models--org--smol"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "shared").write_bytes(b"s" * 1000)
    (repo / "blobs" / "only-new").write_bytes(b"n" * 3000)
    (repo / "blobs" / "only-old").write_bytes(b"o" * 2000)
    for rev, files in {"1111": {"a-Q8_0.gguf": "only-old", "README.md": "shared"},
                       "2222": {"a-Q4_1.gguf": "only-new", "README.md": "shared"}}.items():
        (repo / "snapshots" / rev).mkdir(parents=True)
        for name, blob in files.items():
            (repo / "snapshots" / rev / name).symlink_to(f"../../blobs/{blob}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("2222")
    ollama = tmp_path / "ollama"
    digest = hashlib.sha256(b"x").hexdigest()
    (ollama / "blobs").mkdir(parents=True)
    (ollama / "blobs" / f"sha256-{digest}").write_bytes(b"x")
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "olla" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 1}]}))
    env = dict(os.environ, HF_HUB_CACHE=str(hub), OLLAMA_MODELS=str(ollama),
               LMSTUDIO_MODELS_DIR=str(tmp_path / "lms"))
    return {"env": env, "repo": repo}


def rm(hearth_bin, cache, *args, input=""):
    return subprocess.run([str(hearth_bin), "rm", *args], capture_output=True, text=True,
                          timeout=60, env=cache["env"], input=input)


def test_rm_removes_a_snapshot_and_its_own_blobs(hearth_bin, cache):
    repo = cache["repo"]
    no = rm(hearth_bin, cache, "org/smol", input="n\n")
    assert no.returncode != 0 and "not confirmed: nothing removed" in no.stderr, no.stderr
    assert (repo / "snapshots" / "2222").is_dir()

    got = rm(hearth_bin, cache, "org/smol", input="y\n")
    assert got.returncode == 0, got.stderr
    assert "snapshot 2222 of" in got.stderr and "(1 blob)" in got.stderr, got.stderr
    assert not (repo / "snapshots" / "2222").exists()
    assert not (repo / "blobs" / "only-new").exists()
    assert not (repo / "refs" / "main").exists()
    assert (repo / "blobs" / "shared").exists() and (repo / "blobs" / "only-old").exists()
    assert (repo / "snapshots" / "1111" / "README.md").read_bytes() == b"s" * 1000

    missing = rm(hearth_bin, cache, "org/smol", "--yes")  # refs/main is gone
    assert missing.returncode != 0 and "no snapshot for revision 'main'" in missing.stderr

    last = rm(hearth_bin, cache, "org/smol@1111", "--yes")
    assert last.returncode == 0, last.stderr
    assert "the whole folder" in last.stderr
    assert not repo.exists()


def test_rm_refuses_other_stores_and_paths(hearth_bin, cache, tmp_path):
    got = rm(hearth_bin, cache, "olla", "--yes")
    assert got.returncode != 0 and "is in Ollama's store: remove it with `ollama rm olla`" in got.stderr, got.stderr
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    got = rm(hearth_bin, cache, str(path), "--yes")
    assert got.returncode != 0 and "is a path" in got.stderr and path.exists()
    got = rm(hearth_bin, cache, "org/none", "--yes")
    assert got.returncode != 0 and "org/none is not in the Hugging Face hub cache" in got.stderr
