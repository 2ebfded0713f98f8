"""`hearth bench` end to end: a scripted SSE server (standard library) with known timings and
packings checks the arithmetic and the honesty flags; a real `hearth serve` checks that every
scenario produces sane, internally consistent numbers."""
import json
import os
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

GAP = 0.05  # seconds between scripted tokens
SEEN_TEMPERATURES = []  # the temperature of every completion request the scripted server got
SEEN_FILTERS = []  # and its (top_p, top_k), None where not sent
SEEN_PENALTIES = []  # and its (frequency_penalty, presence_penalty)
SENT_RATES = {}  # mode -> tokens per second between the first and the last content event, as sent


class Scripted(BaseHTTPRequestHandler):
    """The path prefix picks the behaviour: /good, /packed, /disagree, /nousage."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, text):
        data = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, obj):
        self._chunk("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n")

    def do_GET(self):
        if self.path.endswith("/v1/models"):
            self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self):
        mode = self.path.split("/")[1]
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if req.get("model") != "scripted":
            self._json(404, {"error": {"message": f"model '{req.get('model')}' not found"}})
            return
        SEEN_TEMPERATURES.append(req.get("temperature"))
        SEEN_FILTERS.append((req.get("top_p"), req.get("top_k")))
        SEEN_PENALTIES.append((req.get("frequency_penalty"), req.get("presence_penalty")))
        words = sum(len(m["content"].split()) for m in req["messages"] if isinstance(m.get("content"), str))
        n = min(10, req.get("max_tokens", 10))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        time.sleep(0.02)
        if mode == "packed" and n > 1:
            packs = [n // 2, n - n // 2]  # 10 tokens in 2 events
        else:
            packs = [1] * n
        # Events on a fixed schedule (a late one does not delay the rest), their send times kept:
        # on a loaded machine a sleep overshoots, and the test compares with what was sent.
        start, due, sent = time.monotonic(), 0.0, []
        for i, k in enumerate(packs):
            if i:
                due += GAP * k
                time.sleep(max(0.0, start + due - time.monotonic()))
            sent.append(time.monotonic())
            self._event({"choices": [{"index": 0, "delta": {"content": " tok" * k}, "finish_reason": None}]})
        if len(sent) > 1:
            SENT_RATES.setdefault(mode, []).append((n - packs[0]) / (sent[-1] - sent[0]))
        self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        completion = n + 5 if mode == "disagree" and n > 1 else n
        if mode != "nousage":
            last = {"choices": [], "usage": {"prompt_tokens": words + 10, "completion_tokens": completion,
                                             "total_tokens": words + 10 + completion}}
            if mode == "good":  # as Hearth reports speculative decoding
                last["timings"] = {"drafted_n": 6, "accepted_n": 4}
            elif mode == "packed":  # as llama-server does
                last["timings"] = {"draft_n": 8, "draft_n_accepted": 2}
            self._event(last)
        self._event("[DONE]")
        self._chunk("")


@pytest.fixture(scope="module")
def scripted():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(results, scenario, target):
    return [r for r in results["summary"] if r["scenario"] == scenario and r["target"] == target]


def target(results, name):
    return next(t for t in results["targets"] if t["name"] == name)


def test_scripted_arithmetic_and_flags(run_hearth, scripted, tmp_path):
    dead = free_port()  # nothing listens there
    out = tmp_path / "out"
    p = run_hearth("bench", "--target", f"good={scripted}/good", "--target", f"packed={scripted}/packed",
                   "--target", f"disagree={scripted}/disagree/v1", "--target", f"nousage={scripted}/nousage",
                   "--target", f"down=http://127.0.0.1:{dead}", "--scenario", "single", "--lengths", "40",
                   "--reps", "2", "--max-tokens", "10", "--out", out, timeout=120)
    assert p.returncode == 0, p.stderr
    res = json.loads((out / "results.json").read_text())

    good = rows(res, "single", "good")[0]
    assert good["trusted"] and good["failed"] == 0 and good["requests"] == 2
    dec = good["metrics"]["decode_tps"]["median"]
    assert abs(dec - 20.0) / 20.0 < 0.1, dec  # 10 tokens 50 ms apart: 9 / 0.45 s
    sent = sorted(SENT_RATES["good"][-2:])  # the two requests as the server sent them
    assert abs(dec - (sent[0] + sent[1]) / 2) / dec < 0.03, (dec, sent)
    assert good["metrics"]["completion_tokens"]["median"] == 10
    assert good["metrics"]["ttft_ms"]["median"] < 1000 * (good["metrics"]["completion_tokens"]["median"] - 1) * GAP
    assert target(res, "good")["trusted"] is True
    # Prompt lengths calibrated from usage.prompt_tokens (words + 10 here).
    assert abs(good["metrics"]["prompt_tokens"]["median"] - 40) <= 4

    for name, flag in [("packed", "packed"), ("disagree", "usage-disagrees"), ("nousage", "no-usage")]:
        row = rows(res, "single", name)[0]
        assert not row["trusted"] and row["flags"].get(flag) == 2, (name, row)
        t = target(res, name)
        assert t["trusted"] is False and t["flag_reasons"], t
    assert "packs about 5.0 tokens per streamed event" in target(res, "packed")["flag_reasons"][0]

    down = target(res, "down")
    assert down["error"] and "cannot reach" in down["error"]
    assert "'down'" in p.stderr and "skipping" in p.stderr

    # Every raw sample is kept, with its token times.
    good_samples = [s for s in res["samples"] if s["target"] == "good"]
    assert len(good_samples) == 2 and len(good_samples[0]["token_times"]) == 10
    # Speculative decoding as the servers report it (Hearth's and llama-server's field names).
    assert all(s["drafted_tokens"] == 6 and s["accepted_tokens"] == 4 for s in good_samples)
    assert abs(good["metrics"]["draft_accept_pct"]["median"] - 100 * 4 / 6) < 1e-6
    assert abs(rows(res, "single", "packed")[0]["metrics"]["draft_accept_pct"]["median"] - 25) < 1e-6
    assert "draft_accept_pct" not in rows(res, "single", "disagree")[0]["metrics"]

    report = (out / "report.md").read_text()
    assert "untrusted" in report and "did not run" in report and "packs about" in report
    assert "drafts accepted %" in report
    assert "UNTRUSTED" in p.stdout and "good" in p.stdout
    assert (out / "decode_vs_input.svg").read_text().startswith("<svg")


def test_temperature_reaches_every_request(run_hearth, scripted, tmp_path):
    SEEN_TEMPERATURES.clear()
    out = tmp_path / "t"
    p = run_hearth("bench", "--target", f"good={scripted}/good", "--scenario", "single", "--lengths", "20",
                   "--reps", "1", "--max-tokens", "3", "--temperature", "0.7", "--out", out, timeout=60)
    assert p.returncode == 0, p.stderr
    assert SEEN_TEMPERATURES and all(t == 0.7 for t in SEEN_TEMPERATURES), SEEN_TEMPERATURES
    assert json.loads((out / "results.json").read_text())["options"]["temperature"] == 0.7
    assert "temperature 0.70" in (out / "report.md").read_text()
    assert SEEN_FILTERS and all(f == (None, None) for f in SEEN_FILTERS), SEEN_FILTERS
    SEEN_TEMPERATURES.clear()
    SEEN_FILTERS.clear()
    p = run_hearth("bench", "--target", f"good={scripted}/good", "--scenario", "single", "--lengths", "20",
                   "--reps", "1", "--max-tokens", "3", "--out", tmp_path / "g", timeout=60)
    assert p.returncode == 0 and SEEN_TEMPERATURES and all(t == 0 for t in SEEN_TEMPERATURES), SEEN_TEMPERATURES
    assert "greedy" in (tmp_path / "g" / "report.md").read_text()
    # top_p / top_k: sent to every request when given, and named in the report
    SEEN_FILTERS.clear()
    out = tmp_path / "f"
    p = run_hearth("bench", "--target", f"good={scripted}/good", "--scenario", "single", "--lengths", "20",
                   "--reps", "1", "--max-tokens", "3", "--temperature", "0.7", "--top-p", "0.9", "--top-k", "40",
                   "--out", out, timeout=60)
    assert p.returncode == 0, p.stderr
    assert SEEN_FILTERS and all(f == (0.9, 40) for f in SEEN_FILTERS), SEEN_FILTERS
    assert "top_k 40, top_p 0.90" in (out / "report.md").read_text()
    opts = json.loads((out / "results.json").read_text())["options"]
    assert opts["top_p"] == 0.9 and opts["top_k"] == 40
    # penalties likewise
    SEEN_PENALTIES.clear()
    p = run_hearth("bench", "--target", f"good={scripted}/good", "--scenario", "single", "--lengths", "20",
                   "--reps", "1", "--max-tokens", "3", "--frequency-penalty", "0.5", "--presence-penalty", "-0.25",
                   "--out", out, timeout=60)
    assert p.returncode == 0, p.stderr
    assert SEEN_PENALTIES and all(x == (0.5, -0.25) for x in SEEN_PENALTIES), SEEN_PENALTIES
    assert "frequency_penalty 0.50, presence_penalty -0.2" in (out / "report.md").read_text()
    p = run_hearth("bench", "--target", f"good={scripted}/good", "--top-p", "1.5", "--out", out, timeout=60)
    assert p.returncode != 0 and "--top-p must be in (0, 1]" in p.stderr


def test_unknown_model_and_bad_input(run_hearth, scripted, tmp_path):
    p = run_hearth("bench", "--target", f"s={scripted}/good", "--model", "nope", "--scenario", "single",
                   "--lengths", "20", "--reps", "1", "--out", tmp_path / "o", timeout=60)
    assert p.returncode == 2
    assert "target 's'" in p.stderr and "model 'nope' not found" in p.stderr
    assert "no target could be measured" in p.stderr
    for args, text in [(["--target", "x"], "NAME=URL"), (["--target", "a=localhost:1"], "not a server URL"),
                       (["--target", f"a={scripted}", "--scenario", "bogus"], "unknown scenario 'bogus'"),
                       (["--target", f"a={scripted}", "--lengths", "1,x"], "--lengths"),
                       (["--target", f"a={scripted}", "--temperature", "3"], "--temperature must be in [0, 2]"),
                       ([], "at least one")]:
        p = run_hearth("bench", *args, "--out", tmp_path / "o2", timeout=30)
        assert p.returncode == 2 and text in p.stderr and p.stderr.count("\n") == 1, (args, p.stderr)


def test_real_server_quick(hearth_bin, default_model, tmp_path):
    port = free_port()
    out = tmp_path / "out"
    cmd = f"exec {hearth_bin} serve -m {default_model} --port {port} --threads 2 --tune pool.spin_us=0"
    t0 = time.time()
    p = subprocess.run([str(hearth_bin), "bench", "--launch", f"hearth={cmd}",
                        "--target", f"hearth=http://127.0.0.1:{port}", "--quick", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)  # a hang guard; the quick suite takes ~1-4 min, more on a loaded machine
    elapsed = time.time() - t0
    assert p.returncode == 0, p.stderr
    res = json.loads((out / "results.json").read_text())
    t = target(res, "hearth")
    assert t["error"] is None and t["launched"] and t["failed"] == 0 and t["trusted"], t
    scenarios = {r["scenario"] for r in res["summary"]}
    assert scenarios == {"single", "prefill", "decode-vs-input", "double", "concurrency", "agent"}
    for r in res["summary"]:
        assert r["failed"] == 0 and r["trusted"], r

    for s in res["samples"]:
        assert s["ok"], s
        assert s["usage_reported"] and s["prompt_tokens"] > 0
        if s["completion_tokens"] > 0:
            assert 0 < s["ttft_s"] < s["t_end"] - s["t_start"]
            assert s["t_start"] < s["t_first"] <= s["t_last"] <= s["t_end"]
            assert s["chunks"] >= 0.95 * s["completion_tokens"]  # one token per event on our server
        if s["decode_tps"] is not None:
            # wall = n / (end - start) <= n / (last - first) = decode * n / (n - 1); a
            # request whose prefill took less than one decode step may beat decode speed
            # by up to that factor, so that is the bound that must hold.
            n = s["completion_tokens"]
            assert s["decode_tps"] > 0 and s["wall_tps"] <= s["decode_tps"] * n / (n - 1) * 1.001

    # Calibrated prompt lengths: about the size asked for.
    for length in (64, 256):
        row = next(r for r in rows(res, "prefill", "hearth") if r["x"] == length)
        assert abs(row["metrics"]["prompt_tokens"]["median"] - length) <= 0.15 * length, row
    # Longer prompts take longer to the first token.
    pre = {r["x"]: r["metrics"]["ttft_ms"]["median"] for r in rows(res, "prefill", "hearth")}
    assert pre[256] > pre[64]

    conc = {r["x"]: r["metrics"] for r in rows(res, "concurrency", "hearth")}
    # Batching: two streams together at least as fast in aggregate as one (10% for noise on shared cores).
    assert conc[2]["aggregate_tps"]["median"] >= 0.9 * conc[1]["aggregate_tps"]["median"], conc
    dbl = rows(res, "double", "hearth")[0]["metrics"]
    assert dbl["speedup"]["n"] == 2 and dbl["speedup"]["median"] > 0.5

    agent = sorted(rows(res, "agent", "hearth"), key=lambda r: r["x"])
    assert len(agent) == 3
    assert agent[0]["metrics"]["cached_tokens"]["max"] < 64  # a fresh system prompt per repetition
    for later in agent[1:]:
        assert later["metrics"]["cached_tokens"]["min"] > 0, later
        assert later["metrics"]["prompt_tokens"]["median"] > agent[0]["metrics"]["prompt_tokens"]["median"]

    for f in ("report.md", "concurrency.svg", "prefill_ttft.svg", "decode_vs_input.svg", "agent_ttft.svg"):
        assert (out / f).stat().st_size > 0
    # The launched server was stopped.
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0
    print(f"real-server quick bench: {elapsed:.1f} s")
