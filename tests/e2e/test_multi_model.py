"""Several models behind one `hearth serve`: the default model plus two random-weight models of
other shapes (a 2-layer llama of SmolLM2's shape, written by benchmarks/make_random_gguf.py, and
a tiny Qwen3.5 hybrid written by benchmarks/make_qwen35_model.py and converted by `hearth
convert`). With --max-loaded 2, concurrent streams to all three make the least recently used
model unload and reload while others stream; every answer (greedy) equals the one the same
model gives when served alone. Also: /v1/models states, the 404 listing the names, the admin
routes behind --api-key, idle unloads, a pinned model that stays, resident memory back to its
baseline after an unload, and a request that waits for its model to load."""
import json
import pathlib
import subprocess
import sys
import threading
import time

import pytest
import requests

from serve_util import Server, http_get, http_post, parse_metrics, wait_for

REPO = pathlib.Path(__file__).resolve().parents[2]
KEY = "multi-secret"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROMPTS = ["Name a colour.", "Count to three."]
MAX_TOKENS = 6


@pytest.fixture(scope="module")
def model_files(tmp_path_factory, default_model, hearth_bin, shared_dir):
    """{name: path} of the three models."""
    d = tmp_path_factory.mktemp("multi")
    llama = d / "llama2.gguf"
    subprocess.run([sys.executable, str(REPO / "benchmarks/make_random_gguf.py"), "--shape", "smollm2-135m",
                    "--layers", "2", "--seed", "5", "--tokenizer", str(default_model), str(llama)],
                   check=True, capture_output=True, text=True, timeout=120)
    hf = d / "qwen_hf"
    subprocess.run([sys.executable, str(REPO / "benchmarks/make_qwen35_model.py"), str(hf),
                    "--shared", str(shared_dir / "data"), "--hidden", "64", "--layers", "4", "--intermediate",
                    "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--linear-key-heads", "2",
                    "--linear-key-dim", "16", "--linear-value-dim", "16", "--dtype", "f32", "--std", "0.5",
                    "--seed", "3"],
                   check=True, capture_output=True, text=True, timeout=300)
    qwen = d / "qwen.gguf"
    p = subprocess.run([str(hearth_bin), "convert", str(hf), "-o", str(qwen), "--type", "f32"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return {"smol": pathlib.Path(default_model), "llama": llama, "qwen": qwen}


def stream_chat(url, model, prompt, headers=None):
    """A streamed chat completion at temperature 0: (the text, the model the chunks name)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_TOKENS,
            "temperature": 0, "stream": True}
    with requests.post(url + "/v1/chat/completions", json=body, headers=headers, stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        text, named = "", None
        for line in r.iter_lines():
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            named = chunk["model"]
            for c in chunk["choices"]:
                text += c["delta"].get("content") or ""
        return text, named


@pytest.fixture(scope="module")
def solo_answers(model_files, hearth_bin):
    """Each model's answers when it is the only one served (`-m`)."""
    out = {}
    for name, path in model_files.items():
        srv = Server(hearth_bin, path, "--max-seqs", "4")
        try:
            for prompt in PROMPTS:
                out[name, prompt] = stream_chat(srv.url, "x", prompt)[0]
        finally:
            srv.stop()
    return out


@pytest.fixture(scope="module")
def router(model_files, hearth_bin):
    srv = Server(hearth_bin, f"smol={model_files['smol']}", "--model", f"llama={model_files['llama']}",
                 "--model", f"qwen={model_files['qwen']}", "--max-loaded", "2", "--max-seqs", "4",
                 "--api-key", KEY)
    yield srv
    srv.stop()


def states(srv, headers=AUTH):
    r = http_get(srv.url + "/v1/models", headers=headers)
    assert r.status_code == 200, r.text
    return {m["id"]: m["status"] for m in r.json()["data"] if "alias_of" not in m}


def test_concurrent_streams_over_three_models_equal_solo_answers(router, solo_answers):
    assert set(states(router).values()) == {"unloaded"}  # nothing pinned: loaded on demand
    seen, stop = [], threading.Event()

    def watch():  # never more than two models resident
        while not stop.is_set():
            s = states(router)
            seen.append(sum(v in ("loaded", "unloading") for v in s.values()))
            time.sleep(0.02)

    results, errors = {}, []

    def client(i, name, prompt):
        try:
            results[i] = (name, prompt, *stream_chat(router.url, name, prompt, AUTH))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    watcher = threading.Thread(target=watch)
    watcher.start()
    jobs = [(name, prompt) for _ in range(2) for name in ("smol", "llama", "qwen") for prompt in PROMPTS]
    threads = [threading.Thread(target=client, args=(i, *job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    stop.set()
    watcher.join()
    assert not errors, errors
    assert len(results) == len(jobs)
    for name, prompt, text, named in results.values():
        assert named == name
        assert text == solo_answers[name, prompt], (name, prompt)
    assert max(seen) <= 2, seen
    r = http_get(router.url + "/metrics", headers=AUTH)
    assert r.status_code == 200, r.text
    m = parse_metrics(r.text)
    loads = sum(m[f'hearth_model_loads_total{{model="{n}"}}'] for n in ("smol", "llama", "qwen"))
    unloads = sum(m[f'hearth_model_unloads_total{{model="{n}"}}'] for n in ("smol", "llama", "qwen"))
    assert loads >= 3 and unloads >= 1, (loads, unloads)  # the LRU made room at least once
    assert loads - unloads == sum(v == "loaded" for v in states(router).values())
    gen = sum(m[f'hearth_model_generation_tokens_total{{model="{n}"}}'] for n in ("smol", "llama", "qwen"))
    assert gen == m["hearth_generation_tokens_total"]


def test_unknown_model_is_a_404_listing_the_names(router):
    r = http_post(router.url + "/v1/chat/completions", headers=AUTH,
                  json={"model": "nope", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["code"] == "model_not_found"
    assert "smol, llama, qwen" in err["message"]
    r = http_post(router.url + "/v1/messages", headers=AUTH,
                  json={"model": "nope", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404 and r.json()["type"] == "error"
    assert "smol, llama, qwen" in r.json()["error"]["message"]


def test_every_route_picks_the_named_model(router):
    # Different tokenizers: the Qwen3 vocabulary splits text unlike SmolLM2's.
    text = "Tokenizers differ between model families."
    counts = {}
    for name in ("smol", "qwen"):
        r = http_post(router.url + "/tokenize", headers=AUTH, json={"model": name, "content": text})
        assert r.status_code == 200, r.text
        counts[name] = r.json()["tokens"]
        r = http_post(router.url + "/v1/messages/count_tokens", headers=AUTH,
                      json={"model": name, "messages": [{"role": "user", "content": text}]})
        assert r.status_code == 200, r.text
    assert counts["smol"] != counts["qwen"]
    r = http_post(router.url + "/v1/messages", headers=AUTH,
                  json={"model": "llama", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["model"] == "llama", r.text
    r = http_post(router.url + "/v1/responses", headers=AUTH,
                  json={"model": "qwen", "input": "hi", "max_output_tokens": 3})
    assert r.status_code == 200 and r.json()["model"] == "qwen", r.text
    r = http_post(router.url + "/v1/completions", headers=AUTH,
                  json={"model": "smol", "prompt": "One, two,", "max_tokens": 3, "temperature": 0})
    assert r.status_code == 200 and r.json()["model"] == "smol", r.text


def test_admin_routes_need_the_key_and_load_and_unload(router):
    for path in ("/models/load", "/models/unload"):
        r = http_post(router.url + path, json={"model": "llama"})
        assert r.status_code == 401
        r = http_post(router.url + path, json={"model": "llama"}, headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
    assert http_get(router.url + "/v1/models").status_code == 401
    r = http_post(router.url + "/models/load", json={"model": "llama"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "loaded", r.text
    assert states(router)["llama"] == "loaded"
    r = http_post(router.url + "/models/unload", json={"model": "llama"}, headers=AUTH)
    assert r.status_code == 200 and r.json()["status"] == "unloaded" and r.json()["changed"], r.text
    assert states(router)["llama"] == "unloaded"
    r = http_post(router.url + "/models/unload", json={"model": "llama"}, headers=AUTH)
    assert r.status_code == 200 and not r.json()["changed"]
    r = http_post(router.url + "/models/load", json={"model": "nope"}, headers=AUTH)
    assert r.status_code == 404 and "smol, llama, qwen" in r.json()["error"]["message"]
    r = http_post(router.url + "/models/load", json={}, headers=AUTH)
    assert r.status_code == 400


def test_a_request_for_a_loading_model_waits_and_succeeds(router, solo_answers):
    http_post(router.url + "/models/unload", json={"model": "smol"}, headers=AUTH)
    assert states(router)["smol"] == "unloaded"
    seen, stop = set(), threading.Event()

    def watch():
        while not stop.is_set():
            seen.add(states(router)["smol"])
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        # Two requests: the first starts the load, the second arrives while it runs.
        out = {}
        ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, stream_chat(router.url, "smol", PROMPTS[i], AUTH)))
              for i in range(2)]
        for t in ts:
            t.start()
            time.sleep(0.05)
        for t in ts:
            t.join(timeout=60)
    finally:
        stop.set()
        watcher.join()
    assert "loading" in seen, seen
    for i in range(2):
        assert out[i] == (solo_answers["smol", PROMPTS[i]], "smol")


def vm_rss(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def pinned_server(model_files, hearth_bin, tmp_path_factory):
    cfg = tmp_path_factory.mktemp("cfg") / "models.yaml"
    cfg.write_text(f"""models:
  smol:
    model: {model_files['smol']}
    pinned: true
    aliases: [default]
  llama:
    model: {model_files['llama']}
    idle_unload: 0
  qwen:
    model: {model_files['qwen']}
    ctx: 512
""")
    srv = Server(hearth_bin, f"small={model_files['smol']}", "--config", cfg, "--idle-unload", "1",
                 "--max-seqs", "2")
    yield srv
    srv.stop()


def test_config_pinned_model_is_loaded_and_never_unloads(pinned_server):
    r = http_get(pinned_server.url + "/v1/models").json()["data"]
    by_id = {m["id"]: m for m in r}
    assert by_id["smol"]["status"] == "loaded" and by_id["smol"]["pinned"]
    assert by_id["default"]["alias_of"] == "smol"
    assert by_id["small"]["status"] == "unloaded"  # --model NAME=REF beside the config
    assert by_id["qwen"]["status"] == "unloaded"
    r = http_post(pinned_server.url + "/v1/chat/completions",
                  json={"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == "default"
    r = http_post(pinned_server.url + "/models/unload", json={"model": "smol"})
    assert r.status_code == 400 and "pinned" in r.json()["error"]["message"]


def test_idle_models_unload_but_not_pinned_or_idle_unload_0(pinned_server):
    t0 = time.monotonic()
    for name in ("qwen", "llama"):
        stream_chat(pinned_server.url, name, "hi")
    s = states(pinned_server, None)
    assert s["llama"] == "loaded"
    if time.monotonic() - t0 < 0.8:  # (on a loaded machine llama's request may outlast qwen's idle second)
        assert s["qwen"] == "loaded"
    assert wait_for(lambda: states(pinned_server, None)["qwen"] == "unloaded", 5)  # --idle-unload 1
    time.sleep(0.5)
    s = states(pinned_server, None)
    assert s["smol"] == "loaded" and s["llama"] == "loaded"  # pinned; idle_unload: 0 (never)
    assert "after" in pinned_server.stderr() and "idle" in pinned_server.stderr()


def test_resident_memory_returns_to_baseline_after_unload(pinned_server):
    """One load / request / unload cycle first (the first load leaves lasting things: HTTP and
    compute threads, malloc arenas); then the baseline, a second cycle, and the measure."""
    url, pid = pinned_server.url, pinned_server.proc.pid

    def cycle():
        assert http_post(url + "/models/load", json={"model": "small"}).status_code == 200
        stream_chat(url, "small", PROMPTS[0])
        loaded = vm_rss(pid)
        assert http_post(url + "/models/unload", json={"model": "small"}).json()["status"] == "unloaded"
        return loaded

    cycle()
    base = vm_rss(pid)
    loaded = cycle()
    after = vm_rss(pid)
    print(f"VmRSS: baseline {base >> 20} MiB, loaded {loaded >> 20} MiB, after the unload {after >> 20} MiB")
    # The second copy of the default model's weights (98 MB, mapped) and its touched KV blocks.
    assert loaded - base > 60 << 20, (base, loaded)
    assert after <= base * 1.05, (base, loaded, after)
    status = {m["id"]: m for m in http_get(url + "/v1/models").json()["data"]}["small"]
    assert status["memory_bytes"] > 60 << 20  # measured: the growth at load or the drop at unload


def test_agent_starts_its_server_with_several_models(hearth_bin, model_files, tmp_path):
    """`hearth agent -m NAME=REF -m NAME=REF`: its server serves both, the first pinned (loaded
    at start, so /v1/models gives the agent its window), and the agent talks to the first."""
    p = subprocess.run([str(hearth_bin), "agent", "-m", f"smol={model_files['smol']}", "-m",
                        f"llama={model_files['llama']}", "--log-dir", str(tmp_path / "logs"), "--temperature", "0",
                        "-p", "Say hi.", "--tool-choice", "none", "--max-steps", "1", "--max-tokens", "4"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert "hearth agent: model smol, window 8192 tokens" in p.stderr, p.stderr
    log = next((tmp_path / "logs").glob("server-*.log")).read_text()
    assert "2 models: smol (loaded, pinned), llama (unloaded)" in log, log


def test_bad_multi_model_options_are_refused(hearth_bin, model_files, tmp_path):
    def serve(*args):
        return subprocess.run([str(hearth_bin), "serve", "--port", "0", *map(str, args)], capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)

    p = serve("--model", "a=/nonexistent/a.gguf", "--model", f"b={model_files['llama']}")
    assert p.returncode != 0 and "/nonexistent/a.gguf" in p.stderr, p.stderr
    p = serve("--model", f"a={model_files['llama']}", "--model", f"a={model_files['qwen']}")
    assert p.returncode != 0 and "'a' is given twice" in p.stderr, p.stderr
    p = serve("--model", f"a={model_files['llama']}", "--pin", "zz")
    assert p.returncode != 0 and "--pin zz: no such model (models: a)" in p.stderr, p.stderr
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(f"models:\n  a:\n    model: {model_files['llama']}\n    ctx: lots\n")
    p = serve("--config", cfg)
    assert p.returncode != 0 and f"{cfg}:4: models.a.ctx: expected an integer" in p.stderr, p.stderr
    p = serve("--models-dir", tmp_path / "nothing")
    assert p.returncode != 0 and "is not a folder" in p.stderr, p.stderr


def test_models_dir_serves_every_model_found(hearth_bin, model_files, tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    (d / "llama2.gguf").symlink_to(model_files["llama"])
    (d / "qwen.gguf").symlink_to(model_files["qwen"])
    (d / "mmproj-x.gguf").write_bytes(b"not a model")  # a projector: never a model
    (d / "notes.txt").write_text("not a model")
    srv = Server(hearth_bin, f"smol={model_files['smol']}", "--models-dir", d)
    try:
        ids = [m["id"] for m in http_get(srv.url + "/v1/models").json()["data"]]
        assert ids == ["smol", "llama2", "qwen"]
        text, named = stream_chat(srv.url, "qwen", "hi")
        assert named == "qwen"
    finally:
        srv.stop()


def test_memory_budget_unloads_least_recently_used(hearth_bin, model_files):
    """--max-memory 400M: the two random models fit; the default model's plan (98 MB of weights
    and a KV budget of 8 full 8192-token contexts) does not, so both go before it loads (it
    then loads alone, over the budget, with a log line)."""
    srv = Server(hearth_bin, f"llama={model_files['llama']}", "--model", f"qwen={model_files['qwen']}",
                 "--model", f"smol={model_files['smol']}", "--max-memory", "400M")
    try:
        stream_chat(srv.url, "llama", "hi")
        stream_chat(srv.url, "qwen", "hi")
        assert states(srv, None) == {"llama": "loaded", "qwen": "loaded", "smol": "unloaded"}
        stream_chat(srv.url, "smol", "hi")
        assert states(srv, None) == {"llama": "unloaded", "qwen": "unloaded", "smol": "loaded"}
        log = srv.stderr()
        assert "unloaded to make room for smol (--max-memory 400.0 MiB" in log, log
        assert "smol alone exceeds --max-memory" in log, log
    finally:
        srv.stop()


def test_load_timeout_is_a_503_with_retry_after_then_the_model_serves(hearth_bin, model_files):
    """--load-timeout 0.001: the default model takes longer than that to load, so the request that
    started the load gets 503 model_loading with Retry-After; the load goes on, and once it is
    done the model answers."""
    srv = Server(hearth_bin, f"llama={model_files['llama']}", "--model", f"smol={model_files['smol']}",
                 "--load-timeout", "0.001")
    try:
        body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        r = http_post(srv.url + "/v1/chat/completions", json=body)
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"] == "1"
        assert r.json()["error"]["code"] == "model_loading"
        r = http_post(srv.url + "/v1/messages", json=body)  # Anthropic's shape: 529 overloaded
        assert r.status_code in (200, 529), r.text  # 200: the load ended in the meantime
        if r.status_code == 529:
            assert r.headers["Retry-After"] == "1" and r.json()["error"]["type"] == "overloaded_error"
        assert wait_for(lambda: states(srv, None)["smol"] == "loaded", 30)
        assert http_post(srv.url + "/v1/chat/completions", json=body).status_code == 200
    finally:
        srv.stop()
