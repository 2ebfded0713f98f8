#!/usr/bin/env python3
"""Time model switches of a multi-model OpenAI-compatible server (issue 38).

Alternates streamed chat requests between two models of a server that keeps at most one
loaded (hearth serve --max-loaded 1, llama-server --models-dir --models-max 1), so every
request after the first asks for the model that is not loaded. Per request: the time from
sending it to the whole answer of one token (not streamed: a random-weight model's first
token may print as nothing; the switch: unload, load, prefill, one token), and the same
for a second request to the same model right after (already loaded).
Standard library only. Prints one JSON object.

Usage: bench_switch.py URL MODEL_A MODEL_B [--rounds N] [--timeout S]
"""
import argparse
import json
import statistics
import time
import urllib.request


def first_token_seconds(url: str, model: str, timeout: float) -> float:
    body = json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": "Say hello in one word."}],
        "max_tokens": 1,
        "temperature": 0,
    }).encode()
    req = urllib.request.Request(url.rstrip("/") + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    start = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        answer = json.loads(resp.read())
    took = time.perf_counter() - start
    if (answer.get("usage") or {}).get("completion_tokens", 0) < 1:
        raise RuntimeError(f"{model}: no completion token in {answer}")
    return took


def wait_ready(url: str, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/v1/models", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer /v1/models within {timeout} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("model_a")
    ap.add_argument("model_b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    a = ap.parse_args()
    wait_ready(a.url, a.timeout)
    switch, loaded = [], []
    # The first request loads model A from nothing (recorded as "first_load").
    first_load = first_token_seconds(a.url, a.model_a, a.timeout)
    order = [a.model_b, a.model_a] * a.rounds
    for model in order:
        switch.append(first_token_seconds(a.url, model, a.timeout))
        loaded.append(first_token_seconds(a.url, model, a.timeout))
    print(json.dumps({
        "url": a.url,
        "first_load_s": round(first_load, 3),
        "switch_s": [round(x, 3) for x in switch],
        "switch_median_s": round(statistics.median(switch), 3),
        "loaded_s": [round(x, 3) for x in loaded],
        "loaded_median_s": round(statistics.median(loaded), 3),
    }))


if __name__ == "__main__":
    main()
