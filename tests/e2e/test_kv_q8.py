"""The 8-bit KV cache (`--kv-type q8_0`, issue 39) end to end: the real binary, the default model.

- serve: the same --kv-cache-bytes holds 15 q8_0 blocks where it holds 8 f16 ones (34 bytes per 32
  values against 64), the load line says so, and a prompt that only the q8_0 pool can hold is
  answered; a repeated prompt is served from the prefix cache with the same greedy answer; chat works.
- run: --kv-type q8_0 generates and reports its KV type.
- a model whose head_dim is not a multiple of 32 is refused with a message naming its head_dim.
"""
import json
import pathlib
import subprocess
import sys

import pytest

from serve_util import Server, http_get, http_post

ROOT = pathlib.Path(__file__).resolve().parents[2]

THREADS = ("--threads", "2")
# SmolLM2-135M: 30 layers, 3 KV heads of 64; a block of 16 tokens, K and V.
F16_BLOCK = 30 * 2 * 16 * 3 * 64 * 2
Q8_BLOCK = 30 * 2 * 16 * (3 * 64 // 32) * 34
BUDGET = 8 * F16_BLOCK


def post(server, path, body):
    return http_post(server.url + path, json=body, timeout=120)


def test_serve_q8_0_holds_twice_the_tokens(hearth_bin, default_model):
    assert BUDGET // Q8_BLOCK == 15
    f16 = Server(hearth_bin, default_model, "--ctx", 256, "--kv-cache-bytes", BUDGET, "--kv-type", "f16", *THREADS)
    try:
        assert "8 KV blocks of 16 tokens" in f16.stdout_lines[0] and " f16," in f16.stdout_lines[0], f16.stdout_lines
        # 160 prompt tokens + 20 new: over the f16 pool's 128 tokens per sequence.
        r = post(f16, "/v1/completions", {"prompt": [1000 + i for i in range(160)], "max_tokens": 20})
        assert r.status_code == 400 and "128" in r.json()["error"]["message"], r.text
    finally:
        rc, _ = f16.stop()
        assert rc == 0
    srv = Server(hearth_bin, default_model, "--ctx", 256, "--kv-cache-bytes", BUDGET, "--kv-type", "q8_0", *THREADS)
    try:
        line = srv.stdout_lines[0]
        assert "15 KV blocks of 16 tokens" in line and " q8_0," in line, srv.stdout_lines
        prompt = [1000 + i for i in range(160)]
        body = {"prompt": prompt, "max_tokens": 20, "temperature": 0}
        first = post(srv, "/v1/completions", body)
        assert first.status_code == 200, first.text
        a = first.json()
        assert a["usage"]["prompt_tokens"] == 160 and a["usage"]["completion_tokens"] >= 1
        # Again: the prompt's full blocks come from the prefix cache (q8_0 blocks), same greedy text.
        second = post(srv, "/v1/completions", body)
        assert second.status_code == 200, second.text
        b = second.json()
        assert b["choices"][0]["text"] == a["choices"][0]["text"]
        cached = (b["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        assert cached >= 144, b["usage"]
        chat = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hello."}],
                                                  "max_tokens": 16, "temperature": 0})
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["content"].strip()
        assert http_get(srv.url + "/health", timeout=10).status_code == 200
    finally:
        rc, _ = srv.stop()
        assert rc == 0


def test_run_q8_0(run_hearth, default_model):
    r = run_hearth("run", "-m", default_model, "-p", "The capital of France is", "-n", "8", "--temp", "0",
                   "--kv-type", "q8_0", "--json", *THREADS)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kv_type"] == "q8_0" and out["generation_tokens"] >= 1 and out["text"].strip()


@pytest.fixture(scope="module")
def head_dim_40_model(tmp_path_factory, hearth_bin, shared_dir):
    """A tiny hybrid Qwen3.5 whose attention heads are 40 wide (written, then converted by hearth)."""
    d = tmp_path_factory.mktemp("hd40")
    subprocess.run([sys.executable, str(ROOT / "benchmarks/make_qwen35_model.py"), str(d / "hf"),
                    "--shared", str(shared_dir / "data"), "--hidden", "64", "--layers", "4", "--intermediate", "64",
                    "--heads", "2", "--kv-heads", "1", "--head-dim", "40", "--linear-key-heads", "2",
                    "--linear-key-dim", "16", "--linear-value-dim", "16", "--dtype", "f32", "--seed", "3"],
                   check=True, capture_output=True, text=True, timeout=300)
    out = d / "m.gguf"
    p = subprocess.run([str(hearth_bin), "convert", str(d / "hf"), "-o", str(out), "--type", "f32"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return out


def test_head_dim_not_multiple_of_32_is_refused(run_hearth, hearth_bin, head_dim_40_model):
    want = "--kv-type q8_0 needs a head dimension that is a multiple of 32; this model's head_dim is 40"
    r = run_hearth("run", "-m", head_dim_40_model, "-p", "hi", "-n", "2", "--kv-type", "q8_0", *THREADS)
    assert r.returncode != 0 and want in r.stderr, r.stderr
    s = subprocess.run([str(hearth_bin), "serve", "-m", str(head_dim_40_model), "--port", "0", "--kv-type", "q8_0",
                        *THREADS], capture_output=True, text=True, timeout=60)
    assert s.returncode != 0 and want in s.stderr, s.stderr
    # The same model runs with an f16 cache.
    ok = run_hearth("run", "-m", head_dim_40_model, "-p", "hi", "-n", "2", "--kv-type", "f16", *THREADS)
    assert ok.returncode == 0, ok.stderr
