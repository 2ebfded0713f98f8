"""Split GGUFs (llama.cpp's gguf-split layout): the default model split in three by the test
runs from its first shard, from another shard and from a hub-cache name, and gives the same
tokens as the whole file; a missing shard is an error naming it."""
import os
import subprocess

from gguf_split_util import split_gguf
from serve_util import Server, http_get, http_post

PROMPT = ["-p", "The capital of France is", "-n", "8", "--temp", "0"]


def run(hearth_bin, *args, env=None):
    return subprocess.run([str(hearth_bin), *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)


def test_split_model_runs_like_the_whole_file(hearth_bin, default_model, tmp_path):
    want = run(hearth_bin, "run", "-m", default_model, *PROMPT)
    assert want.returncode == 0, want.stderr
    shards = split_gguf(default_model, str(tmp_path / "smol-Q4_1"), 3)
    for shard in (shards[0], shards[2]):
        got = run(hearth_bin, "run", "-m", shard, *PROMPT)
        assert got.returncode == 0, got.stderr
        assert got.stdout == want.stdout
    # From the hub cache: ORG/NAME resolves to the shards in order.
    snap = tmp_path / "hub" / "models--org--split" / "snapshots" / "abcd"
    snap.mkdir(parents=True)
    for s in shards:
        (snap / os.path.basename(s)).symlink_to(s)
    (tmp_path / "hub" / "models--org--split" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--split" / "refs" / "main").write_text("abcd")
    env = dict(os.environ, HF_HUB_CACHE=str(tmp_path / "hub"))
    got = run(hearth_bin, "run", "-m", "org/split", *PROMPT, env=env)
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


def test_missing_shard_is_named(hearth_bin, default_model, tmp_path):
    shards = split_gguf(default_model, str(tmp_path / "m"), 3)
    os.remove(shards[1])
    got = run(hearth_bin, "run", "-m", shards[0], *PROMPT)
    assert got.returncode != 0
    assert f"{shards[1]}: shard 2 of 3 of the split GGUF {shards[0]} is missing" in got.stderr, got.stderr


def test_models_dir_serves_a_split_model_as_one(hearth_bin, default_model, tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    split_gguf(default_model, str(d / "smol-split"), 2)
    srv = Server(hearth_bin, f"whole={default_model}", "--models-dir", d)
    try:
        ids = [m["id"] for m in http_get(srv.url + "/v1/models").json()["data"]]
        assert ids == ["whole", "smol-split"]
        texts = []
        for model in ids:
            r = http_post(srv.url + "/v1/completions", json={
                "model": model, "prompt": "The capital of France is", "max_tokens": 8,
                "temperature": 0})
            assert r.status_code == 200, r.text
            texts.append(r.json()["choices"][0]["text"])
        assert texts[0] == texts[1] and texts[0]
    finally:
        srv.stop()
