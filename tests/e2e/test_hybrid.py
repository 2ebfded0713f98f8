"""Hybrid (Qwen3.5-shaped) models end to end: a tiny random-weight Qwen3.5 checkpoint with the
real Qwen3 tokenizer and the Qwen3.5 chat template (written by benchmarks/make_qwen35_model.py,
numpy only) is converted with `hearth convert`, run with `hearth run` from the folder and from
the GGUF, and served by `hearth serve`: concurrent requests equal solo ones, and a follow-up
turn of a conversation reuses the recurrent-state snapshot of the earlier prompt."""
import concurrent.futures
import json
import subprocess

import pytest
from openai import OpenAI

from serve_util import Server, metrics, tiny_hybrid_gguf, tiny_hybrid_hf



@pytest.fixture(scope="module")
def tiny_qwen35(tmp_path_factory, shared_dir):
    return tiny_hybrid_hf(tmp_path_factory.mktemp("qwen35"), shared_dir)


@pytest.fixture(scope="module")
def tiny_gguf(tiny_qwen35, hearth_bin):
    return tiny_hybrid_gguf(tiny_qwen35, hearth_bin)


def run_json(hearth_bin, model, prompt, n=12):
    p = subprocess.run([str(hearth_bin), "run", "-m", str(model), "-p", prompt, "-n", str(n), "--json",
                        "--threads", "2"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_run_from_folder_equals_run_from_converted_gguf(hearth_bin, tiny_qwen35, tiny_gguf):
    a = run_json(hearth_bin, tiny_qwen35, "Tell me about mountains.")
    b = run_json(hearth_bin, tiny_gguf, "Tell me about mountains.")
    assert a["prompt_tokens"] > 10
    assert len(a["tokens"]) > 0
    assert a["tokens"] == b["tokens"]
    assert a["text"] == b["text"]


def test_convert_q8_0_runs(hearth_bin, tiny_qwen35, tmp_path):
    out = tmp_path / "tiny.q8_0.gguf"
    p = subprocess.run([str(hearth_bin), "convert", str(tiny_qwen35), "-o", str(out), "--type", "q8_0"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    r = run_json(hearth_bin, out, "Hello there", n=8)
    assert r["prompt_tokens"] > 0 and len(r["tokens"]) > 0


@pytest.fixture(scope="module")
def hybrid_server(hearth_bin, tiny_gguf):
    s = Server(hearth_bin, tiny_gguf, "--threads", "2", "--max-seqs", "4", "--ctx", "4096", "--model-id", "tiny")
    yield s
    s.stop()


def chat(client, messages, max_tokens=12):
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=max_tokens, temperature=0)
    return r


def test_concurrent_requests_equal_solo_requests(hybrid_server):
    client = OpenAI(base_url=hybrid_server.url + "/v1", api_key="x")
    questions = [f"Question number {i}: what is {i} plus {i}?" + " Explain." * i for i in range(4)]
    solo = [chat(client, [{"role": "user", "content": q}]).choices[0].message.content for q in questions]
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        together = list(ex.map(lambda q: chat(client, [{"role": "user", "content": q}]).choices[0].message.content,
                               questions))
    assert together == solo


def test_follow_up_turn_reuses_the_conversation(hybrid_server, hearth_bin, tiny_gguf):
    client = OpenAI(base_url=hybrid_server.url + "/v1", api_key="x")
    system = "You are a careful assistant. " + " ".join(f"Rule {i}: answer briefly and cite rule {i}."
                                                          for i in range(60))
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "First question?"}]
    r1 = chat(client, msgs)
    p1 = r1.usage.prompt_tokens
    assert p1 > 600
    msgs += [{"role": "assistant", "content": r1.choices[0].message.content},
             {"role": "user", "content": "Second question?"}]
    r2 = chat(client, msgs)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    # Everything up to the end of the first turn's prompt is reusable (at least the
    # system message's snapshot; the template may render the answer differently).
    assert cached >= 0.8 * (p1 - 16), (cached, p1, r2.usage.prompt_tokens)
    assert cached < r2.usage.prompt_tokens
    assert metrics(hybrid_server)["hearth_state_snapshots"] > 0
    # And the answer is the one a cold start gives: a fresh server, nothing cached.
    fresh = Server(hearth_bin, tiny_gguf, "--threads", "2", "--model-id", "tiny")
    try:
        cold = chat(OpenAI(base_url=fresh.url + "/v1", api_key="x"), msgs)
    finally:
        fresh.stop()
    assert cold.usage.prompt_tokens_details.cached_tokens == 0
    assert cold.usage.prompt_tokens == r2.usage.prompt_tokens
    assert cold.choices[0].message.content == r2.choices[0].message.content
