#!/usr/bin/env python3
"""Constrained decoding's cost under load: N concurrent streams with a JSON schema enforced
against N concurrent free streams, on one `hearth serve` (started here), with the openai SDK.

Both kinds generate --max-tokens tokens per stream: the schema asks for an array of at least 200
short strings, which cannot finish within the budget, so every constrained stream runs to
max_tokens, and the free ones continue plain text (/v1/completions, no chat turn to end), so
the batch sizes match all the way; the token totals are printed. The rounds
alternate (free, constrained, free, ...) so drift on a shared machine hits both alike.
Throughput = all completion tokens / (last end - first start); per-stream decode tok/s =
(tokens - 1) / (last token - first token). Medians over --reps rounds of each kind.

Usage: python3 benchmarks/bench_structured.py [--hearth build/hearth] [--model M.gguf]
       [--threads 2] [--streams 8] [--max-tokens 128] [--reps 5]
"""
import argparse
import json
import os
import pathlib
import signal
import socket
import statistics
import subprocess
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent

SCHEMA = {
    "type": "object",
    "properties": {
        "words": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 200},
    },
    "required": ["words"],
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "words", "schema": SCHEMA, "strict": True}}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(hearth, model, threads, streams):
    port = free_port()
    cmd = [hearth, "serve", "--port", str(port), "--threads", str(threads), "--max-seqs", str(streams),
           "--ctx", "2048"]
    if model:
        cmd += ["-m", model]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    t0 = time.time()
    while time.time() - t0 < 120:
        if proc.poll() is not None:
            raise SystemExit(f"hearth serve exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return proc, url
        except Exception:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("hearth serve did not become ready")


def one_stream(client, i, rep, constrained, max_tokens):
    # /v1/completions on plain text (no chat turn to end): free streams rarely stop before
    # max_tokens, so both kinds produce the same number of tokens.
    prompt = f"Topic {rep}-{i}. Here is a long list of words about it, written as JSON:\n"
    extra = {"response_format": FORMAT} if constrained else {}
    t0 = time.perf_counter()
    first = last = None
    usage = None
    text = []
    for ch in client.completions.create(model=client.hearth_model, prompt=prompt, max_tokens=max_tokens,
                                        temperature=1.0, seed=1000 * rep + i, stream=True,
                                        stream_options={"include_usage": True}, extra_body=extra):
        if ch.choices and ch.choices[0].text:
            now = time.perf_counter()
            first = first or now
            last = now
            text.append(ch.choices[0].text)
        if getattr(ch, "usage", None):
            usage = ch.usage
    t1 = time.perf_counter()
    n = usage.completion_tokens
    return {"start": t0, "end": t1, "tokens": n, "text": "".join(text),
            "decode_tps": (n - 1) / (last - first) if first and last and last > first and n > 1 else 0.0}


def round_of(client, streams, rep, constrained, max_tokens):
    results = [None] * streams
    barrier = threading.Barrier(streams)

    def worker(i):
        barrier.wait()
        results[i] = one_stream(client, i, rep, constrained, max_tokens)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(r["tokens"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    if constrained:
        for r in results:  # every constrained output is a prefix of the schema's JSON
            assert r["text"].startswith('{"words":["'), r["text"][:80]
    return {"tps": total / span, "tokens": total,
            "decode_tps_p50": statistics.median(r["decode_tps"] for r in results)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hearth", default=str(ROOT / "build" / "hearth"))
    ap.add_argument("--model", default=os.environ.get("HEARTH_DEFAULT_MODEL"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    from openai import OpenAI

    proc, url = start_server(args.hearth, args.model, args.threads, args.streams)
    try:
        client = OpenAI(base_url=url + "/v1", api_key="none", timeout=600, max_retries=0)
        client.hearth_model = client.models.list().data[0].id
        round_of(client, args.streams, 0, True, 16)  # warm-up: compiles the schema, faults pages in
        round_of(client, args.streams, 0, False, 16)
        runs = {False: [], True: []}
        for rep in range(1, args.reps + 1):
            for constrained in (False, True) if rep % 2 else (True, False):
                r = round_of(client, args.streams, rep, constrained, args.max_tokens)
                runs[constrained].append(r)
                print(f"rep {rep} {'constrained' if constrained else 'free       '}: {r['tps']:.1f} tok/s "
                      f"({r['tokens']} tokens), per-stream decode p50 {r['decode_tps_p50']:.1f} tok/s", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    free = statistics.median(r["tps"] for r in runs[False])
    cons = statistics.median(r["tps"] for r in runs[True])
    summary = {"streams": args.streams, "threads": args.threads, "max_tokens": args.max_tokens, "reps": args.reps,
               "free_tps_median": round(free, 1), "constrained_tps_median": round(cons, 1),
               "constrained_over_free": round(cons / free, 3),
               "free_decode_p50_median": round(statistics.median(r["decode_tps_p50"] for r in runs[False]), 1),
               "constrained_decode_p50_median": round(statistics.median(r["decode_tps_p50"] for r in runs[True]), 1)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
