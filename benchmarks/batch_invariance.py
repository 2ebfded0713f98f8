#!/usr/bin/env python3
"""Does a greedy answer depend on what else is in the batch?

Against a running OpenAI-compatible server (e.g. `hearth serve --device cuda`): each of four
prompts is asked alone (greedy, with top-2 log-probabilities), then N requests go at once (every
other one greedy, the rest sampled), with and without log-probabilities. For every greedy answer
that differs from the same prompt alone it prints the first token where they part and the top-2
log-probability gap there, alone and batched (a small gap alone: a near-tie that rounding in another
kernel can flip). Standard library only.

Usage: batch_invariance.py [--port 8080] [--n 24] [--max-tokens 32]
"""
import argparse
import json
import threading
import urllib.request


def ask(port, i, temp, logprobs, max_tokens, salt, out):
    body = {"messages": [{"role": "user", "content": f"{salt}story number {i % 4} about a fox"}],
            "max_tokens": max_tokens, "temperature": temp}
    if temp > 0:
        body.update({"top_p": 0.9, "seed": i})
    if logprobs:
        body.update({"logprobs": True, "top_logprobs": 2})
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        resp = json.load(r)
    choice = resp["choices"][0]
    toks = gaps = None
    if logprobs:
        content = choice["logprobs"]["content"]
        toks = [t["token"] for t in content]
        gaps = [t["top_logprobs"][0]["logprob"] - t["top_logprobs"][1]["logprob"] for t in content]
    out[i] = (choice["message"]["content"], toks, gaps)


def batch(args, n, logprobs, salt=""):
    out = {}
    threads = [threading.Thread(target=ask, args=(args.port, i, 0.0 if i % 2 == 0 else 0.9, logprobs,
                                                  args.max_tokens, salt, out)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def report(name, alone, got):
    same = 0
    greedy = range(0, len(got), 2)
    for i in greedy:
        a, b = alone[i % 4], got[i]
        if a[0] == b[0]:
            same += 1
            continue
        if a[1] and b[1]:
            k = next((j for j in range(min(len(a[1]), len(b[1]))) if a[1][j] != b[1][j]), None)
            if k is not None:
                print(f"  {name} #{i}: parts at token {k}: top-2 gap alone {a[2][k]:.4f}, batched {b[2][k]:.4f}")
                continue
        print(f"  {name} #{i}: differs")
    print(f"{name}: greedy answers equal to alone {same} / {len(greedy)}")
    return same == len(greedy)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--max-tokens", type=int, default=32)
    args = ap.parse_args()
    ok = True
    for salt in ("", "again: "):  # a second round on other prompts
        alone = {}
        for i in range(4):
            ask(args.port, i, 0.0, True, args.max_tokens, salt, alone)
        tag = "other prompts, " if salt else ""
        ok &= report(f"{tag}batch of {args.n}, log-probabilities", alone, batch(args, args.n, True, salt))
        ok &= report(f"{tag}batch of {args.n}", alone, batch(args, args.n, False, salt))
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
