#!/usr/bin/env python3
"""Issue 6's benchmarks for Qwen3.5-style hybrid models (Gated DeltaNet + full attention).

Meant for a random Qwen3.5-shaped model (benchmarks/make_qwen35_model.py, converted with
`hearth convert ... --type q8_0`); the generated text is noise, only the timings matter.

  (a) prefill    `hearth run --raw --json -n 1` on a ~512- and a ~16384-token prompt (the same
                 deterministic word text, cut to length); per-token prefill time = prefill_ms /
                 prompt_tokens; ratio 16k / 512 (target <= 1.5: linear, not quadratic).
  (b) streams    `hearth serve`: 1 stream vs 4 simultaneous streams (/v1/completions, temperature
                 0, --max-tokens each, own prompts with no shared prefix); aggregate tok/s =
                 all completion tokens / (last end - first start); ratio 4 / 1 (target >= 2.5).
                 The server has no ignore_eos; completion_tokens is checked against max_tokens.
  (c) multiturn  a chat (/v1/chat/completions, streamed) with a ~2000-token system prompt:
                 turn 1 = system + user; turn k+1 = turn k's messages + the assistant's answer +
                 a new user message. TTFT (request start to the first streamed text) and
                 usage.prompt_tokens_details.cached_tokens per turn. Afterwards each turn >= 2
                 is sent again cold: the same messages with the system prompt's first two
                 characters (digits) changed (differently per request), so no cached prefix applies. Ratio
                 median cold TTFT / median warm TTFT of turns >= 2 (target >= 5).
Medians over --reps repetitions. Each repetition of (c) uses its own system prompt.
The CPUs' busy fraction over the 0.5 s before each measurement (/proc/stat: every process,
hearth serve's own included, e.g. work left from the previous request) is printed and
recorded: on a shared machine it tells which repetitions were disturbed; --max-busy F waits
(at most --wait-s) for a quiet machine before each one.

Usage: python3 benchmarks/bench_hybrid.py --hearth build/hearth --model X.gguf [--reps 3]
       [--threads 2] [--out FILE.json] [--parts a,b,c] [--short 512] [--long 16384]
       [--max-tokens 128] [--turns 4] [--turn-tokens 32] [--system-tokens 2000]
       [--max-busy 0.2 --wait-s 120]
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from bench_serve import Server, concurrency_run, free_port, hearth_run_prefill, med, text_of  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent


def tokens_per_word(hearth, model):
    """Token count of text_of() words, measured with `hearth tokenize` (to size prompts)."""
    sample = text_of(2000, 1)
    out = subprocess.run([hearth, "tokenize", "-m", model, "--no-special", sample], capture_output=True,
                         text=True, check=True).stdout
    n = len(out.split("\n")[0].strip("[] ").replace(",", " ").split())
    return n / 2000


def words_for(n_tokens, tpw):
    return max(1, int(n_tokens / tpw))


def cpu_busy(interval=0.5):
    """Fraction of all CPUs busy over `interval` s (/proc/stat), before a measurement starts."""
    def snap():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, total
    i0, t0 = snap()
    time.sleep(interval)
    i1, t1 = snap()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def quiet(args):
    """With --max-busy, wait (at most --wait-s) until other work leaves the CPUs; returns the busy
    fraction seen just before the measurement (recorded with each repetition)."""
    t0 = time.time()
    busy = cpu_busy()
    while args.max_busy is not None and busy > args.max_busy and time.time() - t0 < args.wait_s:
        time.sleep(2)
        busy = cpu_busy()
    return busy


# ---- (a) prefill scaling --------------------------------------------------------------------

def part_prefill(args, tpw, report):
    base = text_of(words_for(args.long * 1.02, tpw), 11)
    res = {"short": [], "long": []}
    for rep in range(args.reps):
        for key, n in (("short", args.short), ("long", args.long)):
            # A rep-specific first line; run is a fresh process anyway (no cache).
            words = base.split()[:words_for(n, tpw) - 4]
            prompt = f"Document {rep}:\n" + " ".join(words)
            busy = quiet(args)
            t0 = time.perf_counter()
            pf, n_prompt = hearth_run_prefill(args.hearth, args.model, prompt, args.threads, args.long + 1024)
            wall = time.perf_counter() - t0
            res[key].append({"prefill_s": pf, "prompt_tokens": n_prompt, "ms_per_token": pf * 1000 / n_prompt,
                             "wall_s": wall, "cpu_busy_before": busy})
            print(f"  (a) rep {rep} {key}: {n_prompt} tokens, prefill {pf * 1000:.0f} ms, "
                  f"{pf * 1000 / n_prompt:.3f} ms/token ({n_prompt / pf:.0f} tok/s); CPUs busy before {busy:.0%}", flush=True)
    s = med([r["ms_per_token"] for r in res["short"]])
    l = med([r["ms_per_token"] for r in res["long"]])
    report["prefill"] = {"runs": res, "short_tokens": res["short"][0]["prompt_tokens"],
                         "long_tokens": res["long"][0]["prompt_tokens"], "short_ms_per_token": s,
                         "long_ms_per_token": l, "ratio_long_short": l / s, "target": "<= 1.5"}


# ---- (b) concurrent streams -----------------------------------------------------------------

def part_streams(args, srv, report):
    res = {1: [], 4: []}
    for rep in range(args.reps):
        for n in (1, 4):
            busy = quiet(args)
            r = concurrency_run(srv, n, args.max_tokens, rep)
            r["cpu_busy_before"] = busy
            res[n].append(r)
            short = "" if r["tokens"] == n * args.max_tokens else f" (only {r['tokens']} of {n * args.max_tokens} tokens: EOS?)"
            print(f"  (b) rep {rep} x{n}: {r['aggregate_tps']:.1f} tok/s aggregate, per-stream decode "
                  f"{r['decode_tps_p50']:.1f} tok/s, TTFT p50 {r['ttft_p50'] * 1000:.0f} ms{short}; "
                  f"CPUs busy before {busy:.0%}", flush=True)
    one = med([r["aggregate_tps"] for r in res[1]])
    four = med([r["aggregate_tps"] for r in res[4]])
    report["streams"] = {"runs": {str(k): v for k, v in res.items()}, "max_tokens": args.max_tokens,
                         "single_tps": one, "four_tps": four, "ratio": four / one, "target": ">= 2.5",
                         "all_tokens_generated": all(r["tokens"] == n * args.max_tokens
                                                     for n in res for r in res[n])}


# ---- (c) multi-turn prefix reuse ------------------------------------------------------------

def stream_chat(srv, messages, max_tokens):
    """One streamed /v1/chat/completions request: TTFT, the answer text, usage."""
    t0 = time.perf_counter()
    first = None
    text = []
    usage = None
    stream = srv.client.chat.completions.create(model=srv.model, messages=messages, max_tokens=max_tokens,
                                                temperature=0, stream=True,
                                                stream_options={"include_usage": True})
    for ch in stream:
        if ch.choices:
            d = ch.choices[0].delta
            piece = (d.content or "") + (getattr(d, "reasoning_content", None) or "")
            if piece:
                first = first or time.perf_counter()
                text.append(d.content or "")
        if getattr(ch, "usage", None):
            usage = ch.usage
    t1 = time.perf_counter()
    cached = 0
    if usage and getattr(usage, "prompt_tokens_details", None):
        cached = usage.prompt_tokens_details.cached_tokens or 0
    return {"ttft": (first or t1) - t0, "total": t1 - t0, "text": "".join(text),
            "prompt_tokens": usage.prompt_tokens if usage else None,
            "completion_tokens": usage.completion_tokens if usage else None, "cached": cached}


def part_multiturn(args, srv, tpw, report):
    reps = []
    n_cold = 0
    for rep in range(args.reps):
        system = (f"00 Manual {rep}. You are a careful assistant. Reference material follows.\n"
                  + text_of(words_for(args.system_tokens - 20, tpw), 500 + rep))
        messages = [{"role": "system", "content": system}]
        turns = []
        for k in range(args.turns):
            messages.append({"role": "user", "content": f"Question {k + 1}: " + text_of(words_for(40, tpw), 900 + 10 * rep + k)})
            busy = quiet(args)
            r = stream_chat(srv, messages, args.turn_tokens)
            turns.append({"messages": [dict(m) for m in messages], **{x: r[x] for x in r if x != "text"},
                          "cpu_busy_before": busy})
            print(f"  (c) rep {rep} turn {k + 1}: {r['prompt_tokens']} prompt tokens, cached {r['cached']}, "
                  f"TTFT {r['ttft'] * 1000:.0f} ms; CPUs busy before {busy:.0%}", flush=True)
            messages.append({"role": "assistant", "content": r["text"]})
        # The same prompts cold: the system prompt's first two characters ("00", two digit
        # tokens) replaced by another number, a new one for each request: no shared prefix,
        # the same token count.
        for k, t in enumerate(turns[1:], start=2):
            msgs = [dict(m) for m in t.pop("messages")]
            msgs[0]["content"] = f"{n_cold % 99 + 1:02d}" + msgs[0]["content"][2:]
            n_cold += 1
            busy = quiet(args)
            c = stream_chat(srv, msgs, args.turn_tokens)
            t["cold"] = {x: c[x] for x in c if x != "text"}
            t["cold"]["cpu_busy_before"] = busy
            print(f"  (c) rep {rep} turn {k} cold: {c['prompt_tokens']} prompt tokens, cached {c['cached']}, "
                  f"TTFT {c['ttft'] * 1000:.0f} ms (warm {t['ttft'] * 1000:.0f} ms); CPUs busy before {busy:.0%}", flush=True)
        turns[0].pop("messages")
        reps.append(turns)
    warm = [t["ttft"] for turns in reps for t in turns[1:]]
    cold = [t["cold"]["ttft"] for turns in reps for t in turns[1:]]
    first = [turns[0]["ttft"] for turns in reps]
    report["multiturn"] = {"runs": reps, "turns": args.turns, "turn_tokens": args.turn_tokens,
                           "first_turn_ttft_s": med(first), "warm_ttft_s": med(warm), "cold_ttft_s": med(cold),
                           "ratio_cold_warm": med(cold) / med(warm), "target": ">= 5",
                           "warm_cached_tokens": [t["cached"] for turns in reps for t in turns[1:]],
                           "warm_prompt_tokens": [t["prompt_tokens"] for turns in reps for t in turns[1:]]}


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hearth", default=str(ROOT / "build/hearth"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--parts", default="a,b,c")
    ap.add_argument("--short", type=int, default=512)
    ap.add_argument("--long", type=int, default=16384)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--turn-tokens", type=int, default=32)
    ap.add_argument("--system-tokens", type=int, default=2000)
    ap.add_argument("--ctx", type=int, default=8192, help="hearth serve --ctx")
    ap.add_argument("--max-busy", type=float, default=None,
                    help="before each measurement wait until at most this fraction of the CPUs is busy (e.g. 0.2)")
    ap.add_argument("--wait-s", type=float, default=120, help="longest wait for --max-busy")
    args = ap.parse_args()
    parts = set(args.parts.split(","))

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    report = {"model": args.model, "model_bytes": os.path.getsize(args.model), "threads": args.threads,
              "reps": args.reps, "commit": commit, "nproc": os.cpu_count(), "cpu": cpu_model(),
              "loadavg_start": os.getloadavg()}
    print(f"model {args.model} ({report['model_bytes'] / 2**20:.0f} MiB); threads {args.threads}; reps {args.reps}; "
          f"commit {commit[:10]}; {report['nproc']} CPUs ({report['cpu']}); load {os.getloadavg()[0]:.2f}", flush=True)
    tpw = tokens_per_word(args.hearth, args.model)
    t_start = time.perf_counter()

    if "a" in parts:
        part_prefill(args, tpw, report)
    if parts & {"b", "c"}:
        port = free_port()
        srv = Server("hearth", [args.hearth, "serve", "-m", args.model, "--port", str(port), "--threads",
                                str(args.threads), "--ctx", str(args.ctx), "--max-seqs", "4"], port)
        try:
            srv.client.completions.create(model=srv.model, prompt="Hello", max_tokens=4, temperature=0)  # warm-up
            if "b" in parts:
                part_streams(args, srv, report)
            if "c" in parts:
                part_multiturn(args, srv, tpw, report)
        finally:
            srv.stop()
    report["loadavg_end"] = os.getloadavg()
    report["elapsed_s"] = time.perf_counter() - t_start

    print(f"\n## Results (medians over {args.reps} repetitions; {args.threads} threads)")
    print("| benchmark | measurement | ratio | target |")
    print("|---|---|---|---|")
    if "prefill" in report:
        p = report["prefill"]
        print(f"| (a) prefill per token | {p['short_tokens']} tok: {p['short_ms_per_token']:.3f} ms; "
              f"{p['long_tokens']} tok: {p['long_ms_per_token']:.3f} ms | {p['ratio_long_short']:.2f}x | <= 1.5x |")
    if "streams" in report:
        s = report["streams"]
        print(f"| (b) aggregate decode, {s['max_tokens']} tok/stream | 1 stream: {s['single_tps']:.1f} tok/s; "
              f"4 streams: {s['four_tps']:.1f} tok/s | {s['ratio']:.2f}x | >= 2.5x |")
    if "multiturn" in report:
        m = report["multiturn"]
        print(f"| (c) TTFT, turns 2-{m['turns']} | cold {m['cold_ttft_s'] * 1000:.0f} ms; warm "
              f"{m['warm_ttft_s'] * 1000:.0f} ms (cached tokens {min(m['warm_cached_tokens'])}-"
              f"{max(m['warm_cached_tokens'])} of {min(m['warm_prompt_tokens'])}-{max(m['warm_prompt_tokens'])}) "
              f"| {m['ratio_cold_warm']:.2f}x | >= 5x |")
    print(f"elapsed {report['elapsed_s']:.0f} s; load {report['loadavg_start'][0]:.2f} -> {report['loadavg_end'][0]:.2f}")
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
