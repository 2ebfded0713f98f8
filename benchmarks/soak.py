#!/usr/bin/env python3
"""Soak test of `hearth serve` (issue 16, "Load, measured"): many concurrent clients for a
long time, then checks that nothing failed, leaked or drifted.

It starts the server itself (default model, --threads 1, --kv-commit so that the KV pool is
resident from the start), then runs N asyncio clients (openai SDK) until T has passed. Each
request: a chat completion whose system prompt is one of three shared prefixes (~40, ~160
and ~320 words: prefix-cache hits) and whose user message is unique (5..120 words: mixed
prompt lengths); streamed or not at random; 8..64 tokens, greedy or sampled. 10 % of the
clients (every tenth) stream and disconnect after a few chunks: the intended disconnects.
Every --sample seconds it records the server's RSS (VmRSS of /proc/PID/status) and /metrics.

Checks, printed at the end (exit status 1 when one fails):
  failures    no request failed (HTTP error, error chunk, missing finish) except the
              intended disconnects
  kv_leak     once idle: hearth_kv_blocks_used == 0 (finished requests hold no block;
              prefix-cache blocks may stay, unreferenced: hearth_kv_blocks_cached)
  kv_budget   hearth_kv_blocks_used never above hearth_kv_blocks_total at any sample
  totals      hearth_requests_admitted_total == stop + length + cancelled + error outcomes;
              the server counted as many finished requests as the clients saw, and no
              more cancellations than intended disconnects
  rss         RSS growth from --rss-from seconds (default: minute 2, or a quarter of a
              shorter run) to the end < 2 %
  preempted   (--kv-cache-bytes mode) hearth_preemptions_total > 0: requests really queued
              and were preempted

Usage: python3 benchmarks/soak.py [--clients 64] [--minutes 10] [--threads 1]
       [--kv-cache-bytes 12M] [--hearth build/hearth] [--model M.gguf] [--json-out F]
The reduced run used for the record on a 2-core machine: --clients 16 --minutes 2.
"""
import argparse
import asyncio
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import openai

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORDS = ("river stone lantern harbor meadow signal copper orchard window thunder velvet garden "
         "compass ember glacier market canyon feather silver bridge forest candle island mirror "
         "anchor valley rocket saddle quarry beacon").split()
LISTEN_RE = re.compile(r"hearth: listening on http://([\d.]+):(\d+)")
METRIC_RE = re.compile(r'^(hearth_[a-z_]+(?:\{outcome="[a-z]+"\})?) ([-0-9.e+]+)$')


def words(n, rng):
    return " ".join(rng.choice(WORDS) for _ in range(n))


PREFIXES = [
    "You are a helpful assistant. Here is some background you may use: " + words(n, random.Random(n))
    for n in (40, 160, 320)
]


def start_server(args):
    cmd = [args.hearth, "serve", "-m", args.model, "--port", "0", "--threads", str(args.threads), "--ctx",
           str(args.ctx), "--max-seqs", str(args.max_seqs), "--max-queue", str(max(64, args.clients))]
    if args.kv_commit:
        cmd.append("--kv-commit")
    if args.kv_cache_bytes:
        cmd += ["--kv-cache-bytes", args.kv_cache_bytes]
    log = open(args.server_log, "w+b") if args.server_log else tempfile.TemporaryFile(mode="w+b")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True)
    lines = []
    deadline = time.time() + 120
    for line in proc.stdout:
        lines.append(line.rstrip())
        m = LISTEN_RE.search(line)
        if m:
            url = f"http://{m.group(1)}:{m.group(2)}"
            break
        if time.time() > deadline:
            break
    else:
        log.seek(0)
        sys.exit(f"hearth serve did not start: {lines} {log.read().decode()[-2000:]}")
    # Keep draining stdout so the server never blocks on it.
    threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
    print("server:", " ".join(cmd), file=sys.stderr)
    for l in lines:
        print("  " + l, file=sys.stderr)
    return proc, url, log


def status_kib(pid, field="VmRSS"):
    """A memory figure of /proc/PID/status in KiB (VmRSS, RssAnon: heap, RssFile: mapped files)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_kib(pid):
    return status_kib(pid)


def scrape(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = METRIC_RE.match(line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


class Tally:
    def __init__(self):
        self.ok = 0            # finished with a finish_reason (stop / length)
        self.disconnects = 0   # intended: the client closed the stream early
        self.failures = []     # anything else
        self.tokens = 0
        self.started = 0
        self.resets = []       # connections closed before any answer, retried once
        self.t0 = time.monotonic()


async def one_request(client, rng, tally, disconnector):
    stream = disconnector or rng.random() < 0.5
    body = dict(model="default",
                messages=[{"role": "system", "content": rng.choice(PREFIXES)},
                          {"role": "user", "content": f"Request {rng.random():.9f}: " + words(rng.randint(5, 120), rng)}],
                max_tokens=rng.randint(8, 64))
    if rng.random() < 0.5:
        body["temperature"] = 0
    else:
        body.update(temperature=0.8, top_p=0.95, seed=rng.randint(0, 1 << 30))
    tally.started += 1
    for attempt in (0, 1):
        progress = []  # chunks received in this attempt
        try:
            await attempt_request(client, rng, tally, body, stream, disconnector, progress)
            return
        except openai.APIConnectionError as e:
            cause = e.__cause__ or e.__context__
            if attempt == 0 and not progress:
                # The connection was closed before any answer (an HTTP/1.1 keep-alive race: the
                # server closed an idle connection as the client reused it). Nothing reached the
                # engine (the totals check proves it); retried once, as the SDK would.
                tally.resets.append(f"{type(cause).__name__}: {cause} at {time.monotonic() - tally.t0:.0f} s")
                continue
            tally.failures.append(f"{type(e).__name__}: {e} ({type(cause).__name__}: {cause}; "
                                  f"{'streamed' if stream else 'whole'}, at {time.monotonic() - tally.t0:.0f} s)")
            return
        except openai.APIError as e:
            tally.failures.append(f"{type(e).__name__}: {e} ({'streamed' if stream else 'whole'}, "
                                  f"at {time.monotonic() - tally.t0:.0f} s)"[:400])
            return


async def attempt_request(client, rng, tally, body, stream, disconnector, progress):
    if not stream:
        r = await client.chat.completions.create(**body)
        if r.choices[0].finish_reason not in ("stop", "length"):
            tally.failures.append(f"finish_reason {r.choices[0].finish_reason}")
            return
        tally.ok += 1
        tally.tokens += r.usage.completion_tokens
        return
    s = await client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **body)
    cut = rng.randint(2, 6) if disconnector else None
    n, finish, usage = 0, None, 0
    async for chunk in s:
        n += 1
        progress.append(1)
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
        if chunk.usage:
            usage = chunk.usage.completion_tokens
        if cut is not None and n >= cut:
            await s.close()
            tally.disconnects += 1
            return
    if finish not in ("stop", "length"):
        tally.failures.append(f"stream ended without a finish reason ({n} chunks)")
        return
    tally.ok += 1
    tally.tokens += usage


async def client_loop(idx, url, deadline, tally, seed):
    rng = random.Random(seed * 1000 + idx)
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=900)
    disconnector = idx % 10 == 0
    async with client:
        while time.monotonic() < deadline:
            await one_request(client, rng, tally, disconnector)


async def sampler_loop(proc, url, t0, stop, samples, every):
    while not stop.is_set():
        t = time.monotonic() - t0
        try:
            m = await asyncio.get_event_loop().run_in_executor(None, scrape, url)
        except Exception as e:  # noqa: BLE001 - a missed sample is reported, not fatal
            m = {"error": str(e)}
        samples.append({"t": round(t, 1), "rss_kib": rss_kib(proc.pid), "anon_kib": status_kib(proc.pid, "RssAnon"),
                        "file_kib": status_kib(proc.pid, "RssFile"), "metrics": m})
        try:
            await asyncio.wait_for(stop.wait(), every)
        except asyncio.TimeoutError:
            pass


async def soak(args):
    proc, url, log = start_server(args)
    try:
        samples, tally = [], Tally()
        t0 = time.monotonic()
        deadline = t0 + args.minutes * 60
        stop = asyncio.Event()
        sampler = asyncio.create_task(sampler_loop(proc, url, t0, stop, samples, args.sample))
        await asyncio.gather(*(client_loop(i, url, deadline, tally, args.seed) for i in range(args.clients)))
        wall = time.monotonic() - t0
        # Idle: every request (and every disconnect's cancellation) has ended in the engine.
        settle = time.monotonic() + 30
        while True:
            m = scrape(url)
            if (m["hearth_requests_running"] == 0 and m["hearth_requests_waiting"] == 0) or time.monotonic() > settle:
                break
            await asyncio.sleep(0.2)
        stop.set()
        await sampler
        samples.append({"t": round(time.monotonic() - t0, 1), "rss_kib": rss_kib(proc.pid),
                        "anon_kib": status_kib(proc.pid, "RssAnon"), "file_kib": status_kib(proc.pid, "RssFile"),
                        "metrics": m})
        return report(args, tally, samples, m, wall)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def report(args, tally, samples, final, wall):
    out = lambda o: final.get(f'hearth_requests_total{{outcome="{o}"}}', 0)  # noqa: E731
    ended = out("stop") + out("length") + out("cancelled") + out("error")
    checks = {}
    checks["failures"] = (len(tally.failures) == 0, f"{len(tally.failures)} failed of {tally.started} "
                          f"({tally.ok} ok, {tally.disconnects} intended disconnects; {len(tally.resets)} "
                          f"connections closed before an answer, retried)"
                          + (f"; first: {tally.failures[0]}" if tally.failures else ""))
    checks["kv_leak"] = (final["hearth_kv_blocks_used"] == 0,
                         f"idle: {final['hearth_kv_blocks_used']:.0f} blocks used by sequences, "
                         f"{final['hearth_kv_blocks_cached']:.0f} cached for prefix reuse, "
                         f"{final['hearth_kv_blocks_total']:.0f} total")
    peak = max(s["metrics"].get("hearth_kv_blocks_used", 0) for s in samples)
    checks["kv_budget"] = (all(s["metrics"].get("hearth_kv_blocks_used", 0) <= s["metrics"].get(
        "hearth_kv_blocks_total", 0) for s in samples if "error" not in s["metrics"]),
                           f"peak {peak:.0f} of {final['hearth_kv_blocks_total']:.0f} blocks in use")
    totals_ok = (final["hearth_requests_admitted_total"] == ended and out("error") == 0 and
                 out("stop") + out("length") == tally.ok and out("cancelled") <= tally.disconnects and
                 ended == tally.ok + tally.disconnects)
    checks["totals"] = (totals_ok, f"admitted {final['hearth_requests_admitted_total']:.0f} = stop {out('stop'):.0f} + "
                        f"length {out('length'):.0f} + cancelled {out('cancelled'):.0f} + error {out('error'):.0f}; "
                        f"rejected {out('rejected'):.0f}; clients saw {tally.ok} finished + {tally.disconnects} "
                        f"disconnects")
    rss_from = args.rss_from if args.rss_from is not None else min(120.0, args.minutes * 60 / 4)
    base = next((s for s in samples if s["t"] >= rss_from), samples[0])
    last = samples[-1]
    rss_max = max(s["rss_kib"] for s in samples if s["t"] >= base["t"])
    growth = (last["rss_kib"] - base["rss_kib"]) / base["rss_kib"] * 100
    growth_max = (rss_max - base["rss_kib"]) / base["rss_kib"] * 100
    checks["rss"] = (growth_max < 2.0, f"{base['rss_kib'] / 1024:.1f} MiB at {base['t']:.0f} s -> "
                     f"{last['rss_kib'] / 1024:.1f} MiB at the end ({growth:+.2f} %; max {rss_max / 1024:.1f} MiB, "
                     f"{growth_max:+.2f} %); first sample {samples[0]['rss_kib'] / 1024:.1f} MiB; of the growth, heap "
                     f"(RssAnon) {(last['anon_kib'] - base['anon_kib']) / 1024:+.1f} MiB, mapped files (RssFile, "
                     f"the model) {(last['file_kib'] - base['file_kib']) / 1024:+.1f} MiB")
    if args.kv_cache_bytes:
        checks["preempted"] = (final.get("hearth_preemptions_total", 0) > 0,
                               f"{final.get('hearth_preemptions_total', 0):.0f} preemptions")
    print(f"soak: {args.clients} clients x {args.minutes:g} min, --threads {args.threads}"
          + (f", --kv-cache-bytes {args.kv_cache_bytes}" if args.kv_cache_bytes else "")
          + f": {tally.started} requests in {wall:.0f} s, {tally.tokens} completion tokens "
          f"({tally.tokens / wall:.1f}/s), prefix-cache hits "
          f"{final.get('hearth_prefix_cache_hits_total', 0) / max(1, final.get('hearth_prefix_cache_queries_total', 1)) * 100:.0f} %")
    for name, (ok, what) in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'} {name:10s} {what}")
    if args.json_out:
        pathlib.Path(args.json_out).write_text(json.dumps(
            {"args": vars(args), "checks": {k: {"ok": v[0], "what": v[1]} for k, v in checks.items()},
             "failures": tally.failures[:50], "resets": tally.resets[:50], "samples": [{"t": s["t"], "rss_kib": s["rss_kib"], "anon_kib": s.get("anon_kib"),
                                                          "file_kib": s.get("file_kib"),
                                                          "kv_used": s["metrics"].get("hearth_kv_blocks_used"),
                                                          "running": s["metrics"].get("hearth_requests_running"),
                                                          "waiting": s["metrics"].get("hearth_requests_waiting")}
                                                         for s in samples]}, indent=1))
    return all(ok for ok, _ in checks.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hearth", default=os.environ.get("HEARTH_BIN", str(ROOT / "build" / "hearth")))
    ap.add_argument("--model", default=os.environ.get("HEARTH_DEFAULT_MODEL", str(ROOT / "models" / "default.gguf")))
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--max-seqs", type=int, default=8)
    ap.add_argument("--kv-cache-bytes", default="", help="small budget: requests queue and are preempted")
    ap.add_argument("--no-kv-commit", dest="kv_commit", action="store_false",
                    help="leave the KV pool to be committed as it is used")
    ap.add_argument("--sample", type=float, default=5.0, help="seconds between RSS / metrics samples")
    ap.add_argument("--rss-from", type=float, default=None, help="RSS baseline time in s (default min(120, T/4))")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json-out", default="")
    ap.add_argument("--server-log", default="", help="keep the server's stderr (request log) here")
    args = ap.parse_args()
    ok = asyncio.run(soak(args))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
