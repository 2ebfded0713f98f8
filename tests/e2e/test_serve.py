"""`hearth serve` end to end: the real binary on the default model, driven through the official
OpenAI Python SDK, `requests` and raw sockets (byte-exact SSE). One server is shared by the
module; tests that need special options (API key, tiny queue, small context / KV budget,
SIGTERM mid-stream) start their own short-lived server. Every network call has a timeout."""
import json
import os
import pathlib
import re
import shlex
import threading
import time
import uuid

import openai
import pytest
import requests

from serve_util import (RawStream, Server, assert_error_shape, http_get, http_post, metrics, parse_metrics,
                        raw_post, split_sse, wait_for)

THREADS = ["--threads", "2"]
CTX = 2048
HTTP_TIMEOUT = 60

METRIC_NAMES = [
    "hearth_requests_running", "hearth_requests_waiting", "hearth_prompt_tokens_total",
    "hearth_generation_tokens_total", "hearth_time_to_first_token_seconds_bucket",
    "hearth_inter_token_latency_seconds_bucket", "hearth_kv_blocks_used", "hearth_kv_blocks_total",
    "hearth_prefix_cache_hits_total", "hearth_prefix_cache_queries_total", "hearth_batch_size_bucket",
]


@pytest.fixture(scope="module")
def server(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", CTX, *THREADS)
    yield srv
    rc, took = srv.stop(timeout=8)
    assert rc is not None, f"hearth serve did not exit within 8 s of SIGTERM\n{srv.stderr()[-3000:]}"
    assert rc == 0, f"exit code {rc} after SIGTERM\n{srv.stderr()[-3000:]}"
    assert took < 5, f"took {took:.1f} s to exit after SIGTERM"


@pytest.fixture(scope="module")
def model_id(server):
    return http_get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]


@pytest.fixture(scope="module")
def client(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=HTTP_TIMEOUT, max_retries=0)
    yield c
    c.close()  # before the server stops: an idle keep-alive connection delays its exit (it would wait for the keep-alive timeout)


def post(server, path, body, **kw):
    return http_post(server.url + path, json=body, timeout=kw.pop("timeout", HTTP_TIMEOUT), **kw)


def complete(server, **body):
    r = post(server, "/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def chat_msgs(text):
    return [{"role": "user", "content": text}]


def start_stream(server, path, body, timeout=30):
    """A streaming request on a raw socket; headers are read, the body is not."""
    s = RawStream(server.host, server.port, path, dict(body, stream=True), timeout=timeout)
    assert s.status == 200, (s.status, s.read_all())
    return s


# ---------------------------------------------------------------------------
# Basics: /health, /v1/models, /metrics


def test_health_models_metrics(server):
    r = http_get(server.url + "/health", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}

    r = http_get(server.url + "/v1/models", timeout=10)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list" and len(body["data"]) == 1
    m = body["data"][0]
    assert m["id"] == pathlib.Path(os.path.realpath(server.args[3])).stem  # the file name without .gguf
    assert m["object"] == "model"
    assert isinstance(m["created"], int) and abs(m["created"] - time.time()) < 3600
    assert m["owned_by"] == "hearth"
    assert m["context_length"] == CTX

    r = http_get(server.url + "/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    for name in METRIC_NAMES:
        assert f"\n{name}" in "\n" + r.text, name
    values = parse_metrics(r.text)
    assert values["hearth_kv_blocks_total"] > 0
    assert 'hearth_requests_total{outcome="cancelled"}' in values


def test_unknown_route_is_json_404(server):
    r = http_get(server.url + "/v1/nothing-here", timeout=10)
    assert r.status_code == 404
    assert r.headers["Content-Type"].startswith("application/json")
    assert_error_shape(r.json())


# ---------------------------------------------------------------------------
# OpenAI SDK: chat and completions, streaming and not


def test_sdk_chat_and_stream_agree(client, model_id):
    msgs = chat_msgs("Name three colors.")
    resp = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=16, temperature=0)
    assert resp.object == "chat.completion" and resp.id.startswith("chatcmpl-")
    assert resp.model == model_id
    ch = resp.choices[0]
    assert ch.index == 0 and ch.message.role == "assistant"
    assert isinstance(ch.message.content, str) and ch.message.content
    assert ch.finish_reason in ("stop", "length")
    u = resp.usage
    assert u.prompt_tokens > 5 and 1 <= u.completion_tokens <= 16
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens

    stream = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=16, temperature=0,
                                            stream=True)
    parts, finishes, roles = [], [], []
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        for c in chunk.choices:
            if c.delta.role:
                roles.append(c.delta.role)
            if c.delta.content:
                parts.append(c.delta.content)
            if c.finish_reason:
                finishes.append(c.finish_reason)
    assert roles == ["assistant"]
    assert finishes == [ch.finish_reason]
    assert "".join(parts) == ch.message.content  # greedy: streaming changes nothing


def test_sdk_completion_and_stream_agree(client, model_id):
    prompt = "The three primary colors are"
    resp = client.completions.create(model=model_id, prompt=prompt, max_tokens=16, temperature=0)
    assert resp.object == "text_completion" and resp.id.startswith("cmpl-")
    ch = resp.choices[0]
    assert ch.text and ch.finish_reason in ("stop", "length")
    assert resp.usage.completion_tokens <= 16

    parts, finishes = [], []
    for chunk in client.completions.create(model=model_id, prompt=prompt, max_tokens=16, temperature=0,
                                           stream=True):
        assert chunk.object == "text_completion"
        for c in chunk.choices:
            parts.append(c.text or "")
            if c.finish_reason:
                finishes.append(c.finish_reason)
    assert "".join(parts) == ch.text
    assert finishes == [ch.finish_reason]


def test_max_tokens_gives_length(client, model_id):
    for n in (1, 7):
        resp = client.completions.create(model=model_id, prompt="Once upon a time, in a land far away,",
                                         max_tokens=n, temperature=0)
        assert resp.choices[0].finish_reason == "length"
        assert resp.usage.completion_tokens == n
    resp = client.chat.completions.create(model=model_id, messages=chat_msgs("Tell me a long story."),
                                          max_tokens=5, temperature=0)
    assert resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 5


def _greedy_tokens(server, prompt, n):
    out = complete(server, prompt=prompt, max_tokens=n, temperature=0, logprobs=0)
    ch = out["choices"][0]
    toks = ch["logprobs"]["tokens"]
    assert "".join(toks) == ch["text"]
    return ch["text"], toks


def test_stop_string_across_token_boundary(server, client, model_id):
    prompt = "The capital of France is Paris. The capital of Germany is"
    text, toks = _greedy_tokens(server, prompt, 20)
    # A stop string made of the end of one token and the start of the next, first found
    # exactly at that boundary.
    pick = None
    offset = 0
    for i in range(len(toks) - 1):
        a, b = toks[i], toks[i + 1]
        offset += len(a)
        if len(a.strip()) < 1 or len(b.strip()) < 1 or i < 1:
            continue
        stop = a[-2:] + b[:2]
        if text.find(stop) == offset - len(a[-2:]):
            pick = (stop, offset - len(a[-2:]))
            break
    assert pick, f"no usable token boundary in {toks!r}"
    stop, at = pick
    want = text[:at]

    resp = client.completions.create(model=model_id, prompt=prompt, max_tokens=20, temperature=0, stop=[stop])
    assert resp.choices[0].text == want, (stop, toks)
    assert resp.choices[0].finish_reason == "stop"
    assert stop not in resp.choices[0].text

    parts = []
    finish = None
    for chunk in client.completions.create(model=model_id, prompt=prompt, max_tokens=20, temperature=0,
                                           stop=[stop, "zzzzqqq"], stream=True):
        for c in chunk.choices:
            parts.append(c.text or "")
            finish = c.finish_reason or finish
    assert "".join(parts) == want and finish == "stop"

    # A short stop string from the middle of a chat answer (the first place it occurs is cut).
    msgs = chat_msgs("Describe a cat in one sentence.")
    full = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=24, temperature=0)
    content = full.choices[0].message.content
    k = len(content) // 2
    while k < len(content) - 2 and not content[k:k + 2].strip():
        k += 1
    stop = content[k:k + 2]
    assert stop.strip(), content
    r2 = client.chat.completions.create(model=model_id, messages=msgs, max_tokens=24, temperature=0, stop=stop)
    assert r2.choices[0].message.content == content[:content.find(stop)], (stop, content)
    assert r2.choices[0].finish_reason == "stop"


def test_seeds(client, model_id):
    def sample(seed):
        return client.completions.create(model=model_id, prompt="Write a short poem about the sea.\n",
                                         max_tokens=12, temperature=0.9, seed=seed).choices[0].text

    a, b = sample(1234), sample(1234)
    assert a == b
    others = {sample(s) for s in (1, 2)}
    assert len(others | {a}) >= 2, "different seeds gave the same text every time"


def test_chat_logprobs(client, model_id):
    resp = client.chat.completions.create(model=model_id, messages=chat_msgs("Say hello."), max_tokens=8,
                                          temperature=0, logprobs=True, top_logprobs=3)
    lp = resp.choices[0].logprobs
    assert lp is not None and len(lp.content) == resp.usage.completion_tokens
    text = ""
    for e in lp.content:
        assert e.logprob <= 0.0
        assert e.bytes == list(e.token.encode("utf-8"))
        assert len(e.top_logprobs) == 3
        vals = [t.logprob for t in e.top_logprobs]
        assert all(v <= 0.0 for v in vals)
        assert vals == sorted(vals, reverse=True)
        assert e.top_logprobs[0].token == e.token  # greedy picks the most likely
        assert abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4
        text += e.token
    assert text == resp.choices[0].message.content


def test_completion_logprobs(client, model_id):
    resp = client.completions.create(model=model_id, prompt="One, two, three,", max_tokens=8, temperature=0,
                                     logprobs=2)
    ch = resp.choices[0]
    lp = ch.logprobs
    n = resp.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert "".join(lp.tokens) == ch.text
    off = 0
    for tok, v, top, o in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset):
        assert v <= 0.0
        assert o == off
        off += len(tok)  # (ASCII here: characters and bytes agree)
        assert 1 <= len(top) <= 2 and all(x <= 0.0 for x in top.values())
        assert max(top.values()) == pytest.approx(v, abs=1e-4)  # greedy: the sampled one is the top


def test_stream_include_usage(client, model_id):
    chunks = list(client.chat.completions.create(model=model_id, messages=chat_msgs("Hi!"), max_tokens=6,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.usage is None for c in chunks[:-1])
    n_text = sum(1 for c in chunks for ch in c.choices if ch.delta.content)
    assert 1 <= last.usage.completion_tokens <= 6 and n_text <= last.usage.completion_tokens
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens

    chunks = list(client.completions.create(model=model_id, prompt="Hello", max_tokens=4, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 4


def test_cached_tokens_and_timings(server, model_id):
    nonce = uuid.uuid4().hex[:8]
    facts = " ".join(f"Fact {i}: the {w} is number {i * 7 % 100}." for i, w in
                     enumerate(["apple", "river", "stone", "cloud", "tiger", "lamp", "violin"] * 6))
    system = f"Session {nonce}. You are a helpful assistant. Remember these facts. {facts}"
    before = metrics(server)

    def ask(q):
        r = post(server, "/v1/chat/completions", {
            "model": model_id, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": q}]})
        assert r.status_code == 200, r.text
        return r.json()

    first = ask("What is fact 3?")
    second = ask("Which fact mentions the violin?")
    assert first["usage"]["prompt_tokens"] >= 550
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] < 64
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= 512 and cached < second["usage"]["prompt_tokens"], second["usage"]
    for body in (first, second):
        t = body["timings"]
        for key in ("prompt_ms", "predicted_per_second", "ttft_ms"):
            assert isinstance(t[key], (int, float)) and t[key] >= 0, (key, t)
        assert t["prompt_ms"] > 0 and t["ttft_ms"] > 0
    assert second["timings"]["cached_n"] == cached
    after = metrics(server)
    assert after["hearth_prefix_cache_hits_total"] - before["hearth_prefix_cache_hits_total"] >= 512
    assert after["hearth_prefix_cache_queries_total"] > before["hearth_prefix_cache_queries_total"]


def test_eight_concurrent_streams(server, client, model_id):
    prompts = [f"Here is a list of {w}:" for w in
               ("fruits", "animals", "cities", "colors", "tools", "rivers", "planets", "songs")]
    solo = [complete(server, prompt=p, max_tokens=16, temperature=0)["choices"][0] for p in prompts]
    results = [None] * len(prompts)
    errors = []

    def run(i):
        try:
            parts, finish = [], None
            for chunk in client.completions.create(model=model_id, prompt=prompts[i], max_tokens=16,
                                                   temperature=0, stream=True):
                for c in chunk.choices:
                    parts.append(c.text or "")
                    finish = c.finish_reason or finish
            results[i] = ("".join(parts), finish)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=90)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a stream never finished"
    for i, s in enumerate(solo):
        assert results[i] == (s["text"], s["finish_reason"]), (prompts[i], results[i], s)
    m = metrics(server)
    assert m['hearth_batch_size_bucket{le="4"}'] < m['hearth_batch_size_bucket{le="+Inf"}'], \
        "no step ever batched more than 4 sequences"


def test_cancelled_stream_frees_its_slot(server, model_id):
    before = metrics(server)
    assert before["hearth_requests_running"] == 0
    s = start_stream(server, "/v1/chat/completions",
                     {"model": model_id, "messages": chat_msgs("Write a very long essay about the ocean."),
                      "max_tokens": 1500, "temperature": 0.7, "seed": 1})
    try:
        assert s.read_events(3)  # the role chunk and 2 content chunks
        during = metrics(server)
        assert during["hearth_requests_running"] == 1
        assert during["hearth_kv_blocks_used"] > before["hearth_kv_blocks_used"]
    finally:
        s.close()
    t0 = time.monotonic()
    ok = wait_for(lambda: (lambda m: m["hearth_requests_running"] == 0
                           and m["hearth_kv_blocks_used"] == before["hearth_kv_blocks_used"]
                           and m['hearth_requests_total{outcome="cancelled"}']
                           == before['hearth_requests_total{outcome="cancelled"}'] + 1)(metrics(server)),
                  timeout=3)
    took = time.monotonic() - t0
    after = metrics(server)
    assert ok, (before, after)
    assert took < 1.5, f"the slot was freed only after {took:.2f} s"
    assert after["hearth_generation_tokens_total"] < before["hearth_generation_tokens_total"] + 1500


def test_disconnected_non_streaming_request_is_cancelled(server, model_id):
    before = metrics(server)
    s = RawStream(server.host, server.port, "/v1/chat/completions",
                  {"model": model_id, "messages": chat_msgs("Write a very long essay about mountains."),
                   "max_tokens": 1500, "temperature": 0.7, "seed": 2}, read_head=False)
    try:
        assert wait_for(lambda: metrics(server)["hearth_requests_running"] == 1, timeout=5)
    finally:
        s.sock.close()  # gone before the answer
    ok = wait_for(lambda: (lambda m: m["hearth_requests_running"] == 0
                           and m['hearth_requests_total{outcome="cancelled"}']
                           == before['hearth_requests_total{outcome="cancelled"}'] + 1)(metrics(server)),
                  timeout=3)
    assert ok, metrics(server)
    assert metrics(server)["hearth_kv_blocks_used"] == before["hearth_kv_blocks_used"]


def test_streamed_chat_logprobs(client, model_id):
    n_entries, text, n_tokens = 0, "", None
    for chunk in client.chat.completions.create(model=model_id, messages=chat_msgs("Say hello."), max_tokens=8,
                                                temperature=0, logprobs=True, top_logprobs=2, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage:
            n_tokens = chunk.usage.completion_tokens
        for c in chunk.choices:
            if c.logprobs and c.logprobs.content:
                for e in c.logprobs.content:
                    n_entries += 1
                    text += e.token
                    assert e.logprob <= 0 and len(e.top_logprobs) == 2
                    assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
    assert n_tokens is not None and n_entries == n_tokens
    assert text  # the tokens' text, in order


# ---------------------------------------------------------------------------
# Greedy output through the server equals `hearth run`, also under batching.

GREEDY_PROMPT = "The history of the printing press begins"


@pytest.fixture(scope="module")
def run_reference(hearth_bin, default_model):
    import subprocess

    # $HEARTH_E2E_RUN_ARGS: the servers' extra options that `run` shares (e.g. --deterministic).
    extra = shlex.split(os.environ.get("HEARTH_E2E_RUN_ARGS", ""))
    r = subprocess.run([str(hearth_bin), "run", "-m", str(default_model), "--raw", "-p", GREEDY_PROMPT, "-n", "24",
                        "--temp", "0", "--json", "--kv-type", "f16", "--logprobs", "1", *THREADS, *extra],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _server_greedy(server):
    out = complete(server, prompt=GREEDY_PROMPT, max_tokens=24, temperature=0, logprobs=0)
    return out["choices"][0], out["usage"]


def _check_same_as_run(ref, choice, usage):
    # Exact equality of the text: batching and the server path must not change greedy results.
    assert choice["text"] == ref["text"]
    assert usage["completion_tokens"] == len(ref["tokens"])
    assert usage["prompt_tokens"] == ref["prompt_tokens"]
    want = [step["logprob"] for step in ref["logprobs"]]
    got = choice["logprobs"]["token_logprobs"]
    assert got == pytest.approx(want, abs=2e-3)


def test_greedy_equals_hearth_run(server, run_reference):
    choice, usage = _server_greedy(server)
    _check_same_as_run(run_reference, choice, usage)


def test_greedy_equals_hearth_run_while_batched(server, model_id, run_reference):
    others = []
    try:
        for topic in ("volcanoes", "the moon", "ancient Rome"):
            s = start_stream(server, "/v1/chat/completions",
                             {"model": model_id, "messages": chat_msgs(f"Write a long, detailed essay about {topic}."),
                              "max_tokens": 400, "temperature": 0.8, "seed": 7})
            others.append(s)
            assert s.read_events(3)  # the role chunk and two tokens: decoding
        # (The gauges are refreshed at the end of an engine step: poll.)
        assert wait_for(lambda: metrics(server)["hearth_requests_running"] == 3, timeout=3)
        choice, usage = _server_greedy(server)
        # The three long streams were still decoding alongside it (the gauge is refreshed at
        # the end of an engine step, which may come just after the greedy reply: poll).
        assert wait_for(lambda: metrics(server)["hearth_requests_running"] == 3, timeout=3)
    finally:
        for s in others:
            s.close()
    _check_same_as_run(run_reference, choice, usage)
    assert wait_for(lambda: metrics(server)["hearth_requests_running"] == 0, timeout=5)


# ---------------------------------------------------------------------------
# Errors over raw HTTP, in OpenAI's shape


def test_malformed_json(server):
    r = http_post(server.url + "/v1/chat/completions", data=b'{"messages": [{"role": "user",, }]}',
                      headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400
    err = assert_error_shape(r.json())
    assert err["type"] == "invalid_request_error"
    where = re.search(r"byte (\d+)", err["message"])
    assert "JSON" in err["message"] and where, err["message"]
    assert int(where.group(1)) in (30, 31), err["message"]  # the second ',' is byte 31 (1-based)


def test_wrong_field_type(server, model_id):
    r = post(server, "/v1/chat/completions", {"model": model_id, "messages": chat_msgs("hi"), "temperature": "hot"})
    assert r.status_code == 400
    err = assert_error_shape(r.json())
    assert err["param"] == "temperature" and "temperature" in err["message"]
    r = post(server, "/v1/completions", {"prompt": "hi", "max_tokens": "many"})
    assert r.status_code == 400 and assert_error_shape(r.json())["param"] == "max_tokens"
    r = post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]})
    assert r.status_code == 400 and assert_error_shape(r.json())["param"] == "messages[0].content"


def test_n_must_be_one(server):
    r = post(server, "/v1/chat/completions", {"messages": chat_msgs("hi"), "n": 2})
    assert r.status_code == 400
    assert assert_error_shape(r.json())["param"] == "n"


def test_unknown_model(hearth_bin, default_model):
    # Only with --strict-model-names: by default any name is served (test_any_model_name_served).
    srv = Server(hearth_bin, default_model, "--ctx", 512, "--strict-model-names", *THREADS)
    try:
        r = post(srv, "/v1/chat/completions", {"model": "gpt-9-ultra", "messages": chat_msgs("hi")})
        assert r.status_code == 404
        err = assert_error_shape(r.json())
        assert err["code"] == "model_not_found" and err["param"] == "model" and "gpt-9-ultra" in err["message"]
    finally:
        assert srv.stop(timeout=8)[0] == 0


def test_any_model_name_served(server):
    r = post(server, "/v1/chat/completions", {"model": "gpt-9-ultra", "messages": chat_msgs("hi"), "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "gpt-9-ultra"


def test_context_length_exceeded(server):
    r = post(server, "/v1/completions", {"prompt": "Hello there", "max_tokens": 5000})
    assert r.status_code == 400
    err = assert_error_shape(r.json())
    assert err["code"] == "context_length_exceeded"
    assert str(CTX) in err["message"] and "5000" in err["message"], err["message"]
    # A prompt longer than the context on its own.
    r = post(server, "/v1/completions", {"prompt": "word " * 3000, "max_tokens": 1})
    assert r.status_code == 400
    err = assert_error_shape(r.json())
    assert err["code"] == "context_length_exceeded" and str(CTX) in err["message"]


def test_body_too_large(server):
    body = b'{"prompt": "' + b"a" * (17 << 20) + b'"}'
    try:
        r = http_post(server.url + "/v1/completions", data=body,
                          headers={"Content-Type": "application/json"}, timeout=60)
    except requests.ConnectionError as e:  # the server may answer and close before reading it all
        pytest.fail(f"no 413 answer: {e!r}")
    assert r.status_code == 413
    err = assert_error_shape(r.json())
    assert str(16 << 20) in err["message"]
    assert err["code"] == "request_too_large"
    # The server still works afterwards.
    assert http_get(server.url + "/health", timeout=10).status_code == 200


# ---------------------------------------------------------------------------
# SSE framing, byte by byte


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_sse_framing(server, model_id, endpoint):
    if endpoint == "chat":
        path, body = "/v1/chat/completions", {"messages": chat_msgs("Tell me a story.")}
    else:
        path, body = "/v1/completions", {"prompt": "Once upon a time"}
    body.update(model=model_id, max_tokens=8, temperature=0, stream=True, stream_options={"include_usage": True})
    s = raw_post(server, path, body)
    assert s.status == 200
    assert s.headers["content-type"].startswith("text/event-stream")
    events = split_sse(s.body)
    assert events[-1] == "[DONE]" and s.body.endswith(b"data: [DONE]\n\n")
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("[DONE]" != e for e in events[:-1])
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    assert chunks[0]["model"] == model_id
    obj = "chat.completion.chunk" if endpoint == "chat" else "text_completion"
    assert all(c["object"] == obj for c in chunks)
    if endpoint == "chat":
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:] if c["choices"])
    finishing = [i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"] is not None]
    assert len(finishing) == 1
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 8
    assert finishing[0] == len(chunks) - 2  # the finish chunk, then the usage chunk
    assert chunks[finishing[0]]["choices"][0]["finish_reason"] == "length"
    assert all(c["usage"] is None for c in chunks[:-1])


def test_slow_client_does_not_block_others(server, model_id):
    slow = start_stream(server, "/v1/chat/completions",
                        {"model": model_id, "messages": chat_msgs("Describe a forest in detail."),
                         "max_tokens": 64, "temperature": 0, "stream_options": {"include_usage": True}})
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        other = complete(server, prompt="Quick question:", max_tokens=8, temperature=0)
        assert time.monotonic() - t0 < 10
        assert other["usage"]["completion_tokens"] >= 1
        time.sleep(max(0.0, 3.0 - (time.monotonic() - t0)))
        slow.read_all()
    finally:
        slow.close()
    events = split_sse(slow.body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    fins = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(fins) == 1
    n_tokens = chunks[-1]["usage"]["completion_tokens"]
    assert fins[0] == "length" and n_tokens == 64 or fins[0] == "stop" and n_tokens < 64
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])


# ---------------------------------------------------------------------------
# Servers with special options


def test_api_key(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 512, "--api-key", "s3cret-key", *THREADS)
    try:
        assert http_get(srv.url + "/health", timeout=10).status_code == 200  # open without a key
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret-key"},
                        {"Authorization": "Bearer s3cret-key2"}):
            r = http_post(srv.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1},
                              headers=headers, timeout=10)
            assert r.status_code == 401, headers
            assert assert_error_shape(r.json())["type"] == "authentication_error"
            assert http_get(srv.url + "/v1/models", headers=headers, timeout=10).status_code == 401
            assert http_get(srv.url + "/metrics", headers=headers, timeout=10).status_code == 401
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="s3cret-key", timeout=HTTP_TIMEOUT, max_retries=0)
        resp = c.completions.create(model=c.models.list().data[0].id, prompt="hi", max_tokens=2, temperature=0)
        assert resp.usage.completion_tokens >= 1
        bad = openai.OpenAI(base_url=srv.url + "/v1", api_key="nope", timeout=HTTP_TIMEOUT, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.completions.create(model="x", prompt="hi", max_tokens=2)
        c.close()
        bad.close()
    finally:
        rc, _ = srv.stop()
        assert rc == 0


def test_queue_full_gives_429(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 2048, "--max-seqs", 1, "--max-queue", 1, *THREADS)
    streams = []
    try:
        body = {"prompt": "A long story:\n", "max_tokens": 1500, "temperature": 0.8, "seed": 3}
        streams.append(start_stream(srv, "/v1/completions", body))
        assert streams[0].read_events(1)  # running
        streams.append(start_stream(srv, "/v1/completions", body))  # waiting
        assert wait_for(lambda: metrics(srv)["hearth_requests_waiting"] == 1, timeout=5)
        r = http_post(srv.url + "/v1/completions", json=dict(body, max_tokens=4), timeout=10)
        assert r.status_code == 429
        assert r.headers.get("Retry-After", "").isdigit()
        err = assert_error_shape(r.json())
        assert err["type"] == "rate_limit_error"
        # The SDK sees it as a RateLimitError.
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", timeout=HTTP_TIMEOUT, max_retries=0)
        with pytest.raises(openai.RateLimitError):
            c.completions.create(model=c.models.list().data[0].id, prompt="hi", max_tokens=2)
        c.close()  # (an idle keep-alive connection would otherwise be cut at exit)
        assert metrics(srv)['hearth_requests_total{outcome="rejected"}'] >= 2
    finally:
        for s in streams:
            s.close()
        rc, took = srv.stop()
        assert rc == 0 and took < 5


def test_small_context_and_kv_budget(hearth_bin, default_model):
    # 8 KV blocks of 16 tokens: 128 tokens per sequence at most, under a 256-token context.
    block_bytes = 30 * 3 * 64 * 2 * 2 * 16  # SmolLM2-135M: layers * kv heads * head dim * (K,V) * f16 * tokens
    srv = Server(hearth_bin, default_model, "--ctx", 256, "--kv-cache-bytes", 8 * block_bytes, *THREADS)
    try:
        assert "8 KV blocks" in srv.stdout_lines[0], srv.stdout_lines
        assert http_get(srv.url + "/v1/models", timeout=10).json()["data"][0]["context_length"] == 256
        prompt_ids = [1000 + i for i in range(100)]
        r = post(srv, "/v1/completions", {"prompt": prompt_ids, "max_tokens": 200})
        assert r.status_code == 400
        err = assert_error_shape(r.json())
        assert err["code"] == "context_length_exceeded"
        for n in ("256", "300", "100", "200"):
            assert n in err["message"], err["message"]
        # Within the context but beyond the KV budget of one sequence.
        r = post(srv, "/v1/completions", {"prompt": prompt_ids, "max_tokens": 29})
        assert r.status_code == 400
        err = assert_error_shape(r.json())
        assert err["param"] == "max_tokens" and "128" in err["message"] and "129" in err["message"], err
        # Exactly the budget: runs (ignoring EOS is not offered, so it may stop early).
        r = post(srv, "/v1/completions", {"prompt": prompt_ids, "max_tokens": 28, "temperature": 0})
        assert r.status_code == 200, r.text
        u = r.json()["usage"]
        assert u["prompt_tokens"] == 100 and u["completion_tokens"] <= 28
    finally:
        rc, _ = srv.stop()
        assert rc == 0


def test_sigterm_during_stream(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 2048, *THREADS)
    s = None
    try:
        s = start_stream(srv, "/v1/chat/completions", {"messages": chat_msgs("Write a very long story."),
                                                       "max_tokens": 1500, "temperature": 0.8, "seed": 5})
        assert s.read_events(3)
        t0 = time.monotonic()
        srv.terminate()
        try:
            s.read_all()
            closed_cleanly = True
        except (ConnectionError, OSError):
            closed_cleanly = False  # connection closed mid-body is an acceptable ending too
        rc = srv.wait(timeout=8)
        took = time.monotonic() - t0
        assert rc == 0, (rc, srv.stderr()[-2000:])
        assert took < 5, f"exit took {took:.1f} s"
        if closed_cleanly:
            events = split_sse(s.body)
            assert events[-1] == "[DONE]"
            last = json.loads(events[-2])
            assert "error" in last or last["choices"][0]["finish_reason"] is not None, last
    finally:
        if s:
            s.close()
        srv.kill()


def test_body_too_large_message_gives_the_size(server):
    n = (16 << 20) + 1000
    r = http_post(server.url + "/v1/completions", data=b"x" * n, headers={"Content-Type": "application/json"},
                      timeout=60)
    assert r.status_code == 413
    assert str(n) in assert_error_shape(r.json())["message"]


def test_sigterm_with_idle_keepalive_client_exits_fast(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 512, *THREADS)
    try:
        session = requests.Session()  # keeps its connection open between requests
        assert session.get(srv.url + "/v1/models", timeout=10).status_code == 200
        rc, took = srv.stop(timeout=8)
        assert rc == 0
        assert took < 2, f"exit took {took:.1f} s after SIGTERM with an idle keep-alive client"
    finally:
        srv.kill()
