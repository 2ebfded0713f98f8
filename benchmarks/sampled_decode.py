#!/usr/bin/env python3
"""Aggregate decode speed of sampled (temperature) requests against a running server.

`hearth bench` measures greedy requests; most clients sample (the OpenAI default is
temperature 1 over the whole vocabulary). This sends C simultaneous chat completions
(short distinct prompts, --max-tokens each, --temperature, a seed per request) for each
C in --concurrency, --reps times, and prints the median aggregate completion tokens per
second (all completion tokens / wall time of the group). Standard library only, so it
runs on machines without the openai SDK.

Usage: python3 benchmarks/sampled_decode.py --port 8080 [--concurrency 1,16,64]
       [--max-tokens 128] [--temperature 1.0] [--reps 3]
"""
import argparse
import json
import statistics
import threading
import time
import urllib.request


def one(port, i, args, out):
    body = {
        "messages": [{"role": "user", "content": f"Request {i}: write a long story about item {i * 7919 % 1000}."}],
        "max_tokens": args.max_tokens,
        "temperature": args.temperature,
        "seed": i,
    }
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out[i] = json.load(r)["usage"]["completion_tokens"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--concurrency", default="1,16,64")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    for c in [int(x) for x in args.concurrency.split(",")]:
        rates = []
        for rep in range(args.reps):
            out = {}
            threads = [threading.Thread(target=one, args=(args.port, rep * 1000 + i, args, out)) for i in range(c)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            rates.append(sum(out.values()) / wall)
        print(f"concurrency {c}: {statistics.median(rates):.1f} tok/s aggregate (median of {args.reps}; "
              f"{', '.join(f'{r:.1f}' for r in rates)}), temperature {args.temperature}", flush=True)


if __name__ == "__main__":
    main()
