#!/usr/bin/env python3
"""Checks that llama.cpp (through llama-cpp-python) reads the qwen35 GGUF `hearth convert`
writes and computes what Hearth computes on it. Run by hand (needs llama-cpp-python):

    python3 scripts/check_qwen35_llamacpp.py [--hearth build/hearth] [--out /tmp/qwen35-check]

A tiny random Qwen3.5 (benchmarks/make_qwen35_model.py, f32, Qwen3 tokenizer, linear key dim =
value dim: llama.cpp's qwen35 loader assumes they are equal, which the transformers fixtures in
tests/data/qwen35 are not) is converted to an f32 GGUF; for a few prompts both engines tokenize,
run 16 greedy steps, and the top-5 log-probabilities of every step are compared.
Prints max |logprob diff| and whether the token ids and greedy continuations are equal."""
import argparse
import json
import pathlib
import subprocess
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROMPTS = ["The quick brown fox jumps over the lazy dog.", "def fibonacci(n):\n    return",
           "Once upon a time, in a village by the sea,", "1, 2, 3, 4, 5,"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hearth", default=str(ROOT / "build/hearth"))
    ap.add_argument("--out", default="/tmp/qwen35-check")
    a = ap.parse_args()
    import llama_cpp
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, str(ROOT / "benchmarks/make_qwen35_model.py"), str(out / "hf"), "--hidden", "64",
                    "--layers", "4", "--intermediate", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "32",
                    "--linear-key-heads", "2", "--linear-key-dim", "16", "--linear-value-dim", "16", "--dtype", "f32",
                    "--std", "0.5", "--seed", "3"], check=True, capture_output=True)
    gguf = out / "tiny.f32.gguf"
    subprocess.run([a.hearth, "convert", str(out / "hf"), "-o", str(gguf), "--type", "f32"], check=True,
                   capture_output=True)
    llm = llama_cpp.Llama(model_path=str(gguf), n_ctx=256, logits_all=True, verbose=False, n_threads=2)
    worst, all_equal = 0.0, True
    for prompt in PROMPTS:
        h = json.loads(subprocess.run([a.hearth, "run", "-m", str(gguf), "-p", prompt, "--raw", "-n", "16", "--json",
                                       "--logprobs", "5", "--kv-type", "f32", "--threads", "2"],
                                      check=True, capture_output=True, text=True).stdout)
        ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
        same_ids = ids == h["prompt_ids"]
        llm.reset()
        llm.eval(ids)
        gen = []
        for step in h["logprobs"]:
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            lp = logits - (np.log(np.sum(np.exp(logits - logits.max()))) + logits.max())
            for t in step["top_logprobs"]:
                worst = max(worst, abs(lp[t["token"]] - t["logprob"]))
            gen.append(int(np.argmax(logits)))
            llm.eval([step["token"]])  # follow Hearth's path so every step is comparable
        same_gen = gen == h["tokens"]
        all_equal &= same_ids and same_gen
        print(f"{prompt[:40]!r}: {len(ids)} prompt tokens, ids equal {same_ids}, greedy equal {same_gen}")
    print(f"llama_cpp {llama_cpp.__version__}: max |top-5 logprob diff| {worst:.2e}; all equal: {all_equal}")


if __name__ == "__main__":
    main()
