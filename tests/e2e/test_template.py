"""`hearth template`: the prompt a chat template renders, byte for byte as Python jinja2
(set up as transformers does; fixtures from scripts/gen_template_fixtures.py)."""
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "templates"
CONVERSATIONS = sorted((DATA / "conversations").glob("*.json"))


def _expected(name):
    return json.loads((DATA / "expected" / name).read_text(encoding="utf-8"))



@pytest.fixture
def run_raw(hearth_bin):
    """Runs hearth and returns (returncode, stdout bytes, stderr text): exact bytes, no newline handling."""
    import subprocess

    def run(*args):
        p = subprocess.run([str(hearth_bin), *map(str, args)], capture_output=True, timeout=120)
        return p.returncode, p.stdout, p.stderr.decode("utf-8", errors="replace")

    return run


@pytest.mark.parametrize("conv", CONVERSATIONS, ids=lambda p: p.stem)
def test_default_model_template_matches_jinja2(run_raw, default_model, tmp_path, conv):
    expected = _expected("_default_model.json")
    data = json.loads(conv.read_text(encoding="utf-8"))
    data.pop("bos_token", None)  # the model's own tokens must be used
    data.pop("eos_token", None)
    inp = tmp_path / "conv.json"
    inp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    rc, out, err = run_raw("template", "-m", default_model, "--input", inp, "--now", expected["now"])
    want = expected["results"][conv.stem]
    if "error" in want:
        assert rc == 2 and err.startswith("hearth: [template]"), err
    else:
        assert rc == 0, err
        assert out.decode("utf-8") == want["output"]


@pytest.mark.parametrize("conv", CONVERSATIONS, ids=lambda p: p.stem)
def test_jinja_file_matches_jinja2(run_raw, shared_dir, conv):
    expected = _expected("meta-llama-Llama-3.1-8B-Instruct.json")
    tmpl = shared_dir / "data" / "chat-templates" / expected["template"]
    rc, out, err = run_raw("template", "-m", tmpl, "--input", conv, "--now", expected["now"])
    want = expected["results"][conv.stem]
    if "error" in want:  # e.g. the template's raise_exception for parallel tool calls
        assert rc == 2 and out == b"", err
        assert err.startswith("hearth: [template] line ") and want["error"] in err, err
    else:
        assert rc == 0, err
        assert out.decode("utf-8") == want["output"]


def test_now_from_environment(hearth_bin, shared_dir, tmp_path):
    import os
    import subprocess

    expected = _expected("meta-llama-Llama-3.1-8B-Instruct.json")
    tmpl = shared_dir / "data" / "chat-templates" / expected["template"]
    conv = DATA / "conversations" / "tools_only_defined.json"
    env = dict(os.environ, HEARTH_TEMPLATE_NOW=expected["now"])
    p = subprocess.run([str(hearth_bin), "template", "-m", str(tmpl), "--input", str(conv)],
                       capture_output=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode("utf-8") == expected["results"]["tools_only_defined"]["output"]


@pytest.mark.parametrize("conv", CONVERSATIONS, ids=lambda p: p.stem)
def test_tokenizer_config_matches_jinja2(run_raw, shared_dir, conv):
    expected = _expected("_qwen3_tokenizer_config.json")
    cfg = shared_dir / "data" / expected["tokenizer_config"]
    rc, out, err = run_raw("template", "-m", cfg, "--input", conv, "--now", expected["now"])
    want = expected["results"][conv.stem]
    if "error" in want:
        assert rc == 2, err
    else:
        assert rc == 0, err
        assert out.decode("utf-8") == want["output"]


def test_raise_exception_exits_2_with_message(run_raw, tmp_path):
    tmpl = tmp_path / "t.jinja"
    tmpl.write_text("{% if messages[0].role != 'system' %}{{ raise_exception('need a system message') }}{% endif %}")
    inp = tmp_path / "c.json"
    inp.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    rc, out, err = run_raw("template", "-m", tmpl, "--input", inp)
    assert rc == 2
    assert out == b""
    assert err.startswith("hearth: [template] line 1, column ")
    assert "need a system message" in err


def test_bad_template_exits_2_with_line_and_column(run_raw, tmp_path):
    tmpl = tmp_path / "bad.jinja"
    tmpl.write_text("line one\n{% for m in messages %}\n  {{ m.content | nosuchfilter }}\n{% endfor %}")
    inp = tmp_path / "c.json"
    inp.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    rc, _, err = run_raw("template", "-m", tmpl, "--input", inp)
    assert rc == 2
    assert "line 3, column " in err and "unknown filter 'nosuchfilter'" in err, err

    tmpl.write_text("ok\n{% if x %}\n{{ 1 + }}\n{% endif %}")
    rc, _, err = run_raw("template", "-m", tmpl, "--input", inp)
    assert rc == 2
    assert err.startswith("hearth: [template] line 3, column "), err


def test_include_is_refused(run_raw, tmp_path):
    tmpl = tmp_path / "inc.jinja"
    tmpl.write_text("{% include '/etc/passwd' %}")
    inp = tmp_path / "c.json"
    inp.write_text(json.dumps({"messages": []}))
    rc, _, err = run_raw("template", "-m", tmpl, "--input", inp)
    assert rc == 2
    assert "line 1, column 4" in err and "sandboxed" in err, err


def test_missing_input_file_exits_2(run_raw, shared_dir, tmp_path):
    tmpl = shared_dir / "data" / "chat-templates" / "Qwen-Qwen3-0.6B.jinja"
    rc, out, err = run_raw("template", "-m", tmpl, "--input", tmp_path / "nope.json")
    assert rc == 2
    assert out == b""
    assert err.startswith("hearth: ") and "nope.json" in err


def test_missing_model_file_exits_2(run_raw, tmp_path):
    inp = tmp_path / "c.json"
    inp.write_text(json.dumps({"messages": []}))
    rc, _, err = run_raw("template", "-m", tmp_path / "missing.jinja", "--input", inp)
    assert rc == 2
    assert "missing.jinja" in err
