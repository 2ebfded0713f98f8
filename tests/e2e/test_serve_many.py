"""Many streams at once through `hearth serve` (issue 42), on the default model: 128 concurrent
streaming requests on `--max-seqs 128`, each stream's text and finish reason equal to the same
request run alone (greedy), with the engine-step account in /metrics; `--max-seqs 256` takes 256
streams at once, and a /metrics scrape still gets a connection while they are all open (the
default --max-connections follows --max-seqs). Outputs are short so the module stays fast."""
import threading

import openai
import pytest

from serve_util import Server, http_get, http_post, metrics

THREADS = ["--threads", "2"]
HTTP_TIMEOUT = 120
WORDS = ("apples", "rivers", "engines", "violins", "glaciers", "lanterns", "pencils", "castles")


def prompt(i):
    # Distinct from the first words on, so no two requests share more than the template-free
    # prefix "Item".
    return f"Item {i}: a short note on {WORDS[i % len(WORDS)]} number {i * 7 + 3} is"


def stop_server(srv):
    rc, _ = srv.stop(timeout=15)
    assert rc == 0, f"exit code {rc} after SIGTERM\n{srv.stderr()[-3000:]}"


def run_streams(client, model_id, n, max_tokens, barrier_after_first=None):
    """n streaming completions released together; returns [(text, finish_reason)] and errors."""
    start = threading.Barrier(n)
    results, errors = [None] * n, []

    def run(i):
        try:
            start.wait(timeout=60)
            parts, finish, first = [], None, True
            for chunk in client.completions.create(model=model_id, prompt=prompt(i), max_tokens=max_tokens,
                                                   temperature=0, stream=True):
                for c in chunk.choices:
                    parts.append(c.text or "")
                    finish = c.finish_reason or finish
                if first and barrier_after_first is not None:
                    first = False
                    barrier_after_first.wait(timeout=120)
            results[i] = ("".join(parts), finish)
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            errors.append(f"stream {i}: {e!r}")
            if barrier_after_first is not None:
                barrier_after_first.abort()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    return threads, results, errors


def join_all(threads, timeout):
    for t in threads:
        t.join(timeout=timeout)
    assert not any(t.is_alive() for t in threads), "a stream never finished"


@pytest.fixture(scope="module")
def server128(hearth_bin, default_model):
    # Rows finished on the sampling threads (the default on a GPU, where this matters; the CPU
    # back-end's default finishes them on the engine thread): the path the comparison checks.
    srv = Server(hearth_bin, default_model, "--ctx", 256, "--max-seqs", 128, *THREADS,
                 "--tune", "engine.parallel_finish=on")
    yield srv
    stop_server(srv)


def test_128_concurrent_streams_equal_each_request_alone(server128):
    n, max_tokens = 128, 6
    model_id = http_get(server128.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    solo = []
    for i in range(n):
        r = http_post(server128.url + "/v1/completions",
                      json={"model": model_id, "prompt": prompt(i), "max_tokens": max_tokens, "temperature": 0},
                      timeout=HTTP_TIMEOUT)
        assert r.status_code == 200, r.text
        solo.append((r.json()["choices"][0]["text"], r.json()["choices"][0]["finish_reason"]))
    assert len(set(solo)) > n // 4, "the outputs hardly differ: the comparison would prove little"
    before = metrics(server128)
    client = openai.OpenAI(base_url=server128.url + "/v1", api_key="unused", timeout=HTTP_TIMEOUT, max_retries=0)
    try:
        threads, results, errors = run_streams(client, model_id, n, max_tokens)
        join_all(threads, HTTP_TIMEOUT)
    finally:
        client.close()
    assert not errors, errors[:5]
    mismatched = [(i, results[i], solo[i]) for i in range(n) if results[i] != solo[i]]
    assert not mismatched, f"{len(mismatched)} of {n} streams differ from the request alone: {mismatched[:3]}"
    after = metrics(server128)
    # The streams ran together: some step batched more than 64 sequences.
    assert after['hearth_batch_size_bucket{le="64"}'] < after['hearth_batch_size_bucket{le="+Inf"}'], \
        "no step ever batched more than 64 sequences"
    # The engine-step account: every step's forward pass and host phases, and the decode steps.
    steps = after["hearth_engine_steps_total"] - before["hearth_engine_steps_total"]
    assert steps >= max_tokens
    assert after['hearth_engine_step_seconds_total{phase="forward"}'] > \
        before['hearth_engine_step_seconds_total{phase="forward"}']
    for phase in ("between", "plan", "prepare", "sample", "stream", "finish"):
        assert after[f'hearth_engine_step_seconds_total{{phase="{phase}"}}'] >= \
            before[f'hearth_engine_step_seconds_total{{phase="{phase}"}}']
    d_steps = after["hearth_engine_decode_steps_total"] - before["hearth_engine_decode_steps_total"]
    d_rows = after["hearth_engine_decode_rows_total"] - before["hearth_engine_decode_rows_total"]
    assert d_steps >= 1 and d_rows / d_steps > 64, (d_steps, d_rows)
    assert after['hearth_engine_decode_step_seconds_total{part="forward"}'] > \
        before['hearth_engine_decode_step_seconds_total{part="forward"}']
    assert after["hearth_requests_running"] == 0


def test_256_streams_at_once_and_metrics_still_answer(hearth_bin, default_model):
    n = 256
    srv = Server(hearth_bin, default_model, "--ctx", 128, "--max-seqs", n, *THREADS)
    try:
        model_id = http_get(srv.url + "/v1/models", timeout=10).json()["data"][0]["id"]
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", timeout=HTTP_TIMEOUT, max_retries=0)
        try:
            # Every stream holds its connection open after its first chunk until /metrics has
            # been read: 256 streaming connections and one more. 24 tokens each: the first
            # admitted still run when the last prompts (10 steps of --prefill-chunk) are in.
            opened = threading.Barrier(n + 1)
            threads, results, errors = run_streams(client, model_id, n, 24, barrier_after_first=opened)
            opened.wait(timeout=HTTP_TIMEOUT)
            during = metrics(srv)
            join_all(threads, HTTP_TIMEOUT)
        finally:
            client.close()
        assert not errors, errors[:5]
        assert all(r is not None and r[1] in ("length", "stop") for r in results), results[:5]
        assert during["hearth_requests_running"] + during["hearth_requests_waiting"] <= n
        after = metrics(srv)
        assert after['hearth_batch_size_bucket{le="128"}'] < after['hearth_batch_size_bucket{le="+Inf"}'], \
            "no step ever batched more than 128 sequences"
    finally:
        stop_server(srv)
