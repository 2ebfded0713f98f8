#!/usr/bin/env python3
"""How much a running text stream stalls while the server encodes an image.

One streamed text request (greedy, long) runs; after it has produced --warm tokens, an
image request (the image file + a short question) arrives. Reported: the text stream's
median gap between tokens before the image, its largest gap while the image request was
in flight, and the image request's time to first token. Works with any OpenAI-compatible
server that takes image_url content parts (hearth serve, llama-server --mmproj).

  bench_image_stall.py http://127.0.0.1:8080 IMAGE.png [--model NAME] [--reps 3]
"""
import argparse
import base64
import json
import statistics
import sys
import threading
import time

from openai import OpenAI


def token_chunk(chunk):
    """A chunk that carries generated text (answer or reasoning)."""
    if not chunk.choices:
        return False
    d = chunk.choices[0].delta
    extra = getattr(d, "model_extra", None) or {}
    return bool(d.content or extra.get("reasoning_content") or extra.get("reasoning"))


def stream_text(client, model, max_tokens, times):
    stream = client.chat.completions.create(
        model=model, stream=True, temperature=0, max_tokens=max_tokens,
        messages=[{"role": "user", "content": "Count from one to five hundred in words, one number a line."}])
    for chunk in stream:
        if token_chunk(chunk):
            times.append(time.monotonic())


def image_request(client, model, url, out):
    t0 = time.monotonic()
    out["start"] = t0
    stream = client.chat.completions.create(
        model=model, stream=True, temperature=0, max_tokens=4,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "What is in this picture?"}]}])
    for chunk in stream:
        if token_chunk(chunk) and "first" not in out:
            out["first"] = time.monotonic()
    out["end"] = time.monotonic()


def one(client, model, url, warm, max_tokens):
    times = []
    text = threading.Thread(target=stream_text, args=(client, model, max_tokens, times))
    text.start()
    while len(times) < warm and text.is_alive():
        time.sleep(0.005)
    img = {}
    image_request(client, model, url, img)
    text.join()
    before = [b - a for a, b in zip(times, times[1:]) if b <= img["start"]]
    during = [b - a for a, b in zip(times, times[1:]) if b > img["start"] and a < img["end"]]
    return {
        "median_gap_before_ms": 1000 * statistics.median(before) if before else None,
        "max_gap_during_image_ms": 1000 * max(during) if during else None,
        "text_tokens_during_image": len(during),
        "image_ttft_ms": 1000 * (img.get("first", img["end"]) - img["start"]),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("image")
    ap.add_argument("--model", default="default")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warm", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=400)
    a = ap.parse_args()
    client = OpenAI(base_url=a.url.rstrip("/") + "/v1", api_key="none", timeout=600)
    with open(a.image, "rb") as f:
        url = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    runs = [one(client, a.model, url, a.warm, a.max_tokens) for _ in range(a.reps)]
    summary = {k: statistics.median([r[k] for r in runs if r[k] is not None] or [0]) for k in runs[0]}
    print(json.dumps({"runs": runs, "median": summary}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
