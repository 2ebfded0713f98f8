#!/usr/bin/env python3
"""Loads GGUFs written by `hearth convert` from tests/data/qwen35/{dense,moe,next} with
llama-cpp-python and compares its prefill logits with the transformers fixture logits
(tests/data/qwen35/<name>.json, prefill_logits). The fixtures have no tokenizer.json, so a
minimal byte-level vocab (256 tokens, no merges) is added to a copy of each GGUF here, for
this check only. Usage: scripts/check_convert_llamacpp.py HEARTH_BIN OUT_DIR"""
import json, os, subprocess, sys

import numpy as np

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
hearth, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
import gguf  # gguf-py, installed with llama-cpp-python's dependencies when present
import llama_cpp

print("llama_cpp", llama_cpp.__version__)
for name in ["dense", "moe", "next"]:
    path = os.path.join(out, name + ".gguf")
    subprocess.run([hearth, "convert", os.path.join(root, "tests/data/qwen35", name), "-o", path, "--type", "f32"], check=True)
    # add a 256-token vocab
    r = gguf.GGUFReader(path)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(path + ".vocab.gguf", arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        w.add_key_value(k, f.contents(), f.types[0], f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list([bytes([i]).decode("latin-1") for i in range(256)])
    w.add_token_types([1] * 256)
    w.add_token_merges(["a b"])  # llama.cpp refuses an empty merges list
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=list(reversed([int(x) for x in t.shape])), raw_dtype=t.tensor_type)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    ref = json.load(open(os.path.join(root, "tests/data/qwen35", name + ".json")))
    try:
        llm = llama_cpp.Llama(model_path=path + ".vocab.gguf", vocab_only=False, logits_all=True, n_ctx=128, verbose=False)
    except Exception as e:  # noqa: BLE001
        print(f"{name}: llama.cpp could not load it: {type(e).__name__}: {e}")
        continue
    worst = 0.0
    for case in ref["prompts"]:
        ids = case["ids"]
        llm.reset(); llm.eval(ids)
        for pos, row in zip(case["positions"], case["prefill_logits"]):
            got = np.array(llm.scores[int(pos)])
            worst = max(worst, float(np.max(np.abs(got - np.array(row)))))
    print(f"{name}: max |llama.cpp - transformers| prefill logit = {worst:.3g}")
