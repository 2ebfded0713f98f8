"""What a KV disk hit costs the streams already running (`hearth serve --kv-disk DIR`): N
streams decode through the server while a new request whose long prefix is on disk arrives;
reports the streams' largest and median inter-token gap while the hit is served (from the
hit's request to its response) against their gaps in the second before it, and the hit's
time to first token.

Each run: a fresh DIR; server 1 answers the long prompt (max_tokens 1) and stops (its prefix
blocks go to DIR at shutdown); server 2 starts on DIR with room for N + 1 sequences, N
streaming requests start (each restarted when it ends; gaps are counted within a request),
and once every stream has produced --warm tokens the long prompt is sent again (max_tokens 1:
its blocks come back from disk, then its last token is computed). With several binaries
(--hearth a,b) the runs alternate them (A B A B ...), each server 2 on its binary, and the
medians are printed per binary.

  python benchmarks/kv_disk_stall.py --hearth build/hearth --model models/default.gguf --tokens 2000 --streams 4
  (on a GPU: --server-args "--device cuda" --tokens 16000; standard library apart from serve_util)
"""
import argparse
import json
import pathlib
import shutil
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from serve_util import Server  # noqa: E402
from kv_disk_ttft import agent_prompt  # noqa: E402


def post(url, body, timeout=3600):
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


class Stream(threading.Thread):
    """One client streaming completions back to back; `requests` holds each one's token times."""

    def __init__(self, url, i, max_tokens, stop):
        super().__init__(daemon=True)
        self.url, self.i, self.max_tokens, self.stop = url, i, max_tokens, stop
        self.requests = []  # lists of arrival times (time.monotonic) of the chunks with text
        self.error = None

    def current_tokens(self):
        return len(self.requests[-1]) if self.requests else 0

    def run(self):
        prompt = (f"Stream {self.i}. Write the numbers from one upward in words, one per line, "
                  f"and never stop.\none\ntwo\nthree\n")
        try:
            while not self.stop.is_set():
                times = []
                self.requests.append(times)
                with post(self.url, {"prompt": prompt, "max_tokens": self.max_tokens, "temperature": 0,
                                     "stream": True}) as r:
                    for raw in r:
                        if self.stop.is_set():
                            break  # closing the connection cancels the request
                        line = raw.decode().strip()
                        if not line.startswith("data: "):
                            continue
                        if line == "data: [DONE]":
                            break
                        chunk = json.loads(line[6:])
                        if any(c.get("text") for c in chunk.get("choices", [])):
                            times.append(time.monotonic())
        except Exception as e:  # reported by the main thread
            if not self.stop.is_set():
                self.error = e


def gaps_in(streams, t0, t1):
    """Inter-token gaps (ms) of every stream's requests that overlap [t0, t1]."""
    out = []
    for s in streams:
        for times in s.requests:
            for a, b in zip(times, times[1:]):
                if b >= t0 and a <= t1:
                    out.append((b - a) * 1e3)
    return out


def describe(g):
    if not g:
        return "no gaps"
    return f"max {max(g):.1f} ms, median {statistics.median(g):.1f} ms ({len(g)} gaps)"


def one_run(hearth, a, args, prompt):
    shutil.rmtree(a.dir, ignore_errors=True)
    s = Server(hearth, a.model, *args, start_timeout=300)
    try:
        with post(s.url, {"prompt": prompt, "max_tokens": 1, "temperature": 0}) as r:
            n_prompt = json.loads(r.read())["usage"]["prompt_tokens"]
    finally:
        s.stop(timeout=300)
    s = Server(hearth, a.model, *args, start_timeout=300)
    stop = threading.Event()
    streams = [Stream(s.url, i, a.stream_tokens, stop) for i in range(a.streams)]
    try:
        for st in streams:
            st.start()
        deadline = time.monotonic() + 600
        while min(st.current_tokens() for st in streams) < a.warm:
            if time.monotonic() > deadline or any(st.error for st in streams):
                raise RuntimeError(f"streams did not warm up: {[st.error for st in streams]}")
            time.sleep(0.01)
        t0 = time.monotonic()
        with post(s.url, {"prompt": prompt, "max_tokens": 1, "temperature": 0}) as r:
            hit = json.loads(r.read())
        t1 = time.monotonic()
        time.sleep(0.3)  # the gaps that end after the hit's response count too
    finally:
        stop.set()
        for st in streams:
            st.join(timeout=60)
        s.stop(timeout=300)
    errors = [st.error for st in streams if st.error]
    if errors:
        raise RuntimeError(f"a stream failed: {errors[0]}")
    during = gaps_in(streams, t0, t1)
    before = gaps_in(streams, t0 - 1.0, t0 - 1e-3)
    log = [ln.strip() for ln in s.stderr().splitlines() if "kv-disk:" in ln and " read in " in ln]
    t = hit["timings"]
    return {"n_prompt": n_prompt, "ttft": t["ttft_ms"], "wall": (t1 - t0) * 1e3, "disk_n": t.get("cached_disk_n", 0),
            "during": during, "before": before, "log": log}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hearth", required=True, help="binary, or several separated by commas (runs alternate them)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=16000, help="the hit's prompt length to aim for")
    ap.add_argument("--streams", type=int, default=4, help="streams decoding while the hit comes in")
    ap.add_argument("--warm", type=int, default=32, help="tokens each stream produces before the hit")
    ap.add_argument("--stream-tokens", type=int, default=1024, help="max_tokens of each stream's request")
    ap.add_argument("--runs", type=int, default=3, help="runs per binary")
    ap.add_argument("--dir", default="/tmp/hearth_kv_disk_stall")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--server-args", default="", help="more options for the servers, e.g. '--device cuda'")
    a = ap.parse_args()
    if a.streams < 1 or a.runs < 1 or a.tokens < 64 or a.warm < 2:
        ap.error("--streams and --runs must be at least 1, --tokens at least 64, --warm at least 2")
    binaries = [b for b in a.hearth.split(",") if b]
    for b in binaries:
        if not pathlib.Path(b).is_file():
            ap.error(f"--hearth: no such file: {b}")
    if not pathlib.Path(a.model).is_file():
        ap.error(f"--model: no such file: {a.model}")
    prompt = agent_prompt(int(a.tokens * 0.51))
    ctx = max(a.tokens * 5 // 4 + 1024, a.stream_tokens + 256)
    args = ["--threads", str(a.threads), "--ctx", str(ctx), "--max-seqs", str(a.streams + 1),
            "--kv-cache-bytes", "4G", "--kv-disk", a.dir, "--kv-disk-bytes", "8G"] + a.server_args.split()
    results = {b: [] for b in binaries}
    for run in range(a.runs):
        for b in binaries:
            r = one_run(b, a, args, prompt)
            results[b].append(r)
            print(f"run {run} {b}: hit of {r['n_prompt']} prompt tokens ({r['disk_n']} from disk): ttft "
                  f"{r['ttft']:.0f} ms (wall {r['wall']:.0f} ms); the {a.streams} streams' gaps during the hit: "
                  f"{describe(r['during'])}; in the second before: {describe(r['before'])}", flush=True)
            for ln in r["log"]:
                print("  server:", ln, flush=True)
    for b in binaries:
        rs = results[b]
        med = lambda key: statistics.median(x[key] for x in rs)  # noqa: E731
        worst = statistics.median(max(x["during"]) if x["during"] else 0.0 for x in rs)
        typical = statistics.median(statistics.median(x["during"]) if x["during"] else 0.0 for x in rs)
        base = statistics.median(statistics.median(x["before"]) if x["before"] else 0.0 for x in rs)
        print(f"{b}: medians of {len(rs)} runs: hit ttft {med('ttft'):.0f} ms; streams' largest gap during the hit "
              f"{worst:.1f} ms, median gap during it {typical:.1f} ms (before it: {base:.1f} ms)")
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
