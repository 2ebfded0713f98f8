"""GET /v1/status, the web page's live numbers: its fields and types, totals equal to what
/metrics says at the same moment, rates and recent percentiles that move while a client
streams, the window parameter, the API key, and one entry per model when several are served."""
import math
import threading
import time

import pytest
import requests

from serve_util import Server, http_get, http_post, metrics, wait_for

KEY = "status-key"


@pytest.fixture(scope="module")
def server(hearth_bin, default_model):
    s = Server(hearth_bin, default_model, "--max-seqs", "4")
    yield s
    s.stop()


def status(server, headers=None, **params):
    r = http_get(server.url + "/v1/status", params=params, headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    return r.json()


def chat(server, prompt, max_tokens=16, stream=False, model=None):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
            "stream": stream}
    if model:
        body["model"] = model
    r = http_post(server.url + "/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r


def is_count(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def check_histogram(h):
    assert set(h) == {"count", "sum", "recent"}, h
    assert is_count(h["count"]) and isinstance(h["sum"], (int, float)) and h["sum"] >= 0
    r = h["recent"]
    if r is not None:
        assert set(r) == {"count", "mean", "p50", "p90", "p99"}, r
        assert is_count(r["count"]) and r["count"] <= h["count"]
        if r["count"]:
            assert 0 <= r["p50"] <= r["p90"] <= r["p99"], r
            assert r["mean"] >= 0
        else:
            assert r["p50"] is r["p90"] is r["p99"] is r["mean"] is None


def test_fields_and_types(server):
    chat(server, "Hello")
    s = status(server)
    assert s["object"] == "hearth.status" and s["status"] == "ok"
    assert s["uptime_s"] > 0
    assert set(s) == {"object", "uptime_s", "window_s", "status", "requests", "tokens", "latency", "batch", "kv", "kv_disk",
                      "kv_swap", "prefix_cache", "preemptions", "memory", "models"}
    r = s["requests"]
    assert set(r) == {"running", "waiting", "admitted", "finished", "rejected", "finished_per_s"}
    assert all(is_count(r[k]) for k in ("running", "waiting", "admitted", "rejected"))
    assert set(r["finished"]) == {"stop", "length", "cancelled", "error"}
    assert all(is_count(v) for v in r["finished"].values())
    t = s["tokens"]
    assert set(t) == {"prompt_total", "generation_total", "sampled_total", "processed_total", "in_per_s", "out_per_s"}
    assert t["prompt_total"] > 0 and t["generation_total"] > 0 and t["sampled_total"] > 0
    check_histogram(s["latency"]["ttft_seconds"])
    check_histogram(s["latency"]["inter_token_seconds"])
    check_histogram(s["batch"]["size"])
    assert is_count(s["batch"]["steps"]) and s["batch"]["steps"] > 0
    kv = s["kv"]
    assert set(kv) == {"blocks_used", "blocks_cached", "blocks_total", "blocks_free", "state_snapshots"}
    assert all(is_count(v) for v in kv.values())
    assert kv["blocks_used"] + kv["blocks_cached"] + kv["blocks_free"] == kv["blocks_total"] > 0
    assert s["kv_disk"] == {"blocks": 0, "snapshots": 0, "bytes": 0, "hit_tokens": 0, "disabled": False}
    sw = s["kv_swap"]
    assert set(sw) == {"swapped_out", "swapped_in", "recomputed", "bytes", "capacity_bytes", "disk_out", "disk_in",
                       "disk_fallbacks", "disk_bytes"}
    assert all(is_count(v) for v in sw.values()) and sw["capacity_bytes"] > 0
    pc = s["prefix_cache"]
    assert set(pc) == {"query_tokens", "hit_tokens", "hit_rate", "recent_hit_rate"}
    assert 0 <= pc["hit_rate"] <= 1 and pc["hit_tokens"] <= pc["query_tokens"]
    assert is_count(s["preemptions"])
    assert s["memory"]["host_resident_bytes"] > 10 << 20 and is_count(s["memory"]["device_bytes"])
    [m] = s["models"]
    assert m["name"] == "SmolLM2-135M-Instruct.Q4_1" and m["state"] == "loaded" and m["pinned"] is True
    # What the model is, from its GGUF header and its plan.
    assert m["architecture"] == "llama" and m["quantization"] == "Q4_1"
    assert 130e6 < m["parameters"] < 140e6
    assert m["size_bytes"] > 50 << 20
    assert m["context_length"] == m["context_train"] == 8192
    assert m["device"] == "cpu" and m["kv_type"] == "f16" and m["max_seqs"] == 4
    assert m["vision"] is False and m["loads"] == 1
    assert m["requests"] == {"running": 0, "waiting": 0}
    assert m["kv"]["blocks_total"] == kv["blocks_total"]


def test_totals_equal_metrics(server):
    chat(server, "Tell me about bread.", max_tokens=24)
    chat(server, "Tell me about bread.", max_tokens=12, stream=True)  # a prefix-cache hit
    r = http_post(server.url + "/v1/chat/completions", json={"messages": "nope"})
    assert r.status_code == 400  # a rejected request
    s = status(server)
    m = metrics(server)  # idle: nothing moved in between
    r = s["requests"]
    assert r["running"] == m["hearth_requests_running"] == 0
    assert r["waiting"] == m["hearth_requests_waiting"] == 0
    assert r["admitted"] == m["hearth_requests_admitted_total"]
    for outcome in ("stop", "length", "cancelled", "error"):
        assert r["finished"][outcome] == m[f'hearth_requests_total{{outcome="{outcome}"}}'], outcome
    assert r["rejected"] == m['hearth_requests_total{outcome="rejected"}'] >= 1
    t = s["tokens"]
    assert t["prompt_total"] == m["hearth_prompt_tokens_total"]
    assert t["generation_total"] == m["hearth_generation_tokens_total"]
    assert t["sampled_total"] == m["hearth_sampled_tokens_total"]
    assert t["processed_total"] == m["hearth_batch_tokens_sum"]
    for key, name in (("ttft_seconds", "hearth_time_to_first_token_seconds"),
                      ("inter_token_seconds", "hearth_inter_token_latency_seconds")):
        h = s["latency"][key]
        assert h["count"] == m[name + "_count"] > 0, key
        assert math.isclose(h["sum"], m[name + "_sum"], rel_tol=1e-12), key
    assert s["batch"]["size"]["count"] == m["hearth_batch_size_count"]
    assert s["batch"]["size"]["sum"] == m["hearth_batch_size_sum"]
    kv = s["kv"]
    assert kv["blocks_used"] == m["hearth_kv_blocks_used"]
    assert kv["blocks_cached"] == m["hearth_kv_blocks_cached"] > 0
    assert kv["blocks_total"] == m["hearth_kv_blocks_total"]
    assert kv["state_snapshots"] == m["hearth_state_snapshots"]
    pc = s["prefix_cache"]
    assert pc["query_tokens"] == m["hearth_prefix_cache_queries_total"]
    assert pc["hit_tokens"] == m["hearth_prefix_cache_hits_total"] > 0
    assert pc["hit_rate"] == pytest.approx(pc["hit_tokens"] / pc["query_tokens"])
    assert s["preemptions"] == m["hearth_preemptions_total"]
    # Every sampled token is the first of its request or follows another one.
    assert t["sampled_total"] == s["latency"]["ttft_seconds"]["count"] + s["latency"]["inter_token_seconds"]["count"]


def test_rates_and_recent_percentiles_move_while_a_client_streams(server):
    before = status(server)["tokens"]["sampled_total"]  # also a sample to start windows from
    done = threading.Event()  # the client has stopped streaming
    stop = threading.Event()  # the test has seen what it wanted
    result = {"status": []}

    def client():
        # Streams one request after another until told to stop, so that a poll finds one
        # running however fast the machine answers (the model may also stop early).
        body = {"messages": [{"role": "user", "content": "Count from one to fifty in words."}], "max_tokens": 120,
                "temperature": 0, "stream": True}
        while not stop.is_set():
            with requests.post(server.url + "/v1/chat/completions", json=body, stream=True, timeout=120) as r:
                result["status"].append(r.status_code)
                for _ in r.iter_lines():
                    pass
        done.set()

    t = threading.Thread(target=client, daemon=True)
    t.start()
    seen = []

    def moving():
        s = status(server, window=2)
        seen.append(s)
        return s["requests"]["running"] == 1 and (s["tokens"]["out_per_s"] or 0) > 0 and not done.is_set()

    assert wait_for(moving, 30, interval=0.25), [x["requests"] for x in seen[-3:]]
    s = seen[-1]
    # The span actually used: from the newest sample at least 2 s old (samples are taken as the
    # route is asked, so on a loaded machine the one before may be older).
    assert s["window_s"] is not None and s["window_s"] >= 0.05
    it = s["latency"]["inter_token_seconds"]["recent"]
    assert it["count"] > 0 and 0 < it["p50"] <= it["p99"] <= 1
    assert s["models"][0]["requests"]["running"] == 1
    stop.set()
    t.join(timeout=120)
    assert result["status"] and all(c == 200 for c in result["status"]), result
    # A window reaching back before the stream holds all of its tokens: rate x window is at
    # least what the stream sampled, and no more than everything sampled since start.
    s = status(server, window=60)
    streamed = s["tokens"]["sampled_total"] - before
    assert streamed > 0
    in_window = s["tokens"]["out_per_s"] * s["window_s"]
    assert streamed - 1e-6 <= in_window <= s["tokens"]["sampled_total"] + 1e-6, (streamed, in_window)


def test_window_parameter_is_checked(server):
    for bad in ("abc", "0", "61", "5s", "nan", ""):
        r = http_get(server.url + "/v1/status", params={"window": bad})
        assert r.status_code == 400, bad
        err = r.json()["error"]
        assert err["param"] == "window" and "window" in err["message"], err
    assert status(server, window="1.5")["object"] == "hearth.status"


def test_status_needs_the_api_key(hearth_bin, default_model):
    s = Server(hearth_bin, default_model, "--api-key", KEY)
    try:
        r = http_get(s.url + "/v1/status")
        assert r.status_code == 401 and r.headers.get("WWW-Authenticate") == "Bearer"
        assert http_get(s.url + "/v1/status", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert status(s, headers={"Authorization": f"Bearer {KEY}"})["status"] == "ok"
        assert status(s, headers={"x-api-key": KEY})["status"] == "ok"
    finally:
        s.stop()


def test_every_model_has_an_entry(hearth_bin, default_model):
    # Two names for the one small file: "first" pinned (loaded at start), "second" on demand.
    s = Server(hearth_bin, f"first={default_model}", "--model", f"second={default_model}", "--pin", "first")
    try:
        st = status(s)
        names = [m["name"] for m in st["models"]]
        assert names == ["first", "second"]
        first, second = st["models"]
        assert first["state"] == "loaded" and first["architecture"] == "llama"
        assert second["state"] == "unloaded" and "architecture" not in second and second["context_length"] is None
        assert second["finished"] == {"stop": 0, "length": 0, "cancelled": 0, "error": 0}
        chat(s, "Hi", max_tokens=4, model="second")
        st = status(s)
        m = metrics(s)
        second = st["models"][1]
        assert second["state"] == "loaded" and second["quantization"] == "Q4_1" and second["context_length"] == 8192
        for name, e in (("first", st["models"][0]), ("second", second)):
            assert e["generation_tokens_total"] == m[f'hearth_model_generation_tokens_total{{model="{name}"}}']
            assert e["prompt_tokens_total"] == m[f'hearth_model_prompt_tokens_total{{model="{name}"}}']
            for outcome, v in e["finished"].items():
                assert v == m[f'hearth_model_requests_total{{model="{name}",outcome="{outcome}"}}']
            assert e["device_bytes"] == m[f'hearth_model_device_memory_bytes{{model="{name}"}}']
        assert second["finished"]["length"] + second["finished"]["stop"] == 1
        # The server-wide KV numbers add up over the loaded models.
        assert st["kv"]["blocks_total"] == sum(e["kv"]["blocks_total"] for e in st["models"])
    finally:
        s.stop()
