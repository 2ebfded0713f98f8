"""Speculative decoding with prompt lookup (`hearth serve --spec ngram`) end to end: the real
binary, the default model, the official openai client. Greedy answers with speculation must be
the answers without it (a server with --spec off), for each request alone and for several
concurrent ones (drafts verified in the same steps as the other sequences' tokens), streamed or
not; /metrics and each response's timings must show accepted drafts, so the comparison cannot
pass with speculation doing nothing; "speculative": false turns it off for one request."""
import concurrent.futures
import json
import subprocess

import openai
import pytest

from serve_util import Server, metrics, tiny_hybrid_gguf, tiny_hybrid_hf


CODE = """def merge(a, b):
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    out.extend(a[i:])
    out.extend(b[j:])
    return out
"""

CHAT = [
    "Repeat this Python function exactly, renaming `out` to `result`:\n\n" + CODE,
    "Copy this code verbatim:\n\n" + CODE,
    "What is the capital of France?",
]
COMPLETIONS = [
    CODE + "\n\n# The same function again:\n" + CODE[:60],
    "red green blue, red green blue, red green blue, red green",
    "Once upon a time, in a small village by the sea, there lived",
]
MAX_TOKENS = 64
ARGS = ["--threads", "2", "--ctx", "1024", "--max-seqs", "4"]


def ask(client, kind, prompt, **extra):
    """(text, timings) of one greedy request."""
    if kind == "chat":
        r = client.chat.completions.create(model="default", messages=[{"role": "user", "content": prompt}],
                                           max_tokens=MAX_TOKENS, temperature=0, extra_body=extra or None)
        return r.choices[0].message.content, r.model_extra.get("timings", {})
    r = client.completions.create(model="default", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0,
                                  extra_body=extra or None)
    return r.choices[0].text, r.model_extra.get("timings", {})


def stream_text(client, prompt):
    parts = []
    for chunk in client.chat.completions.create(model="default", messages=[{"role": "user", "content": prompt}],
                                                max_tokens=MAX_TOKENS, temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
    return "".join(parts)


REQUESTS = [("chat", p) for p in CHAT] + [("completions", p) for p in COMPLETIONS]


def client_for(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def reference(hearth_bin, default_model):
    """Each request's answer from a server without speculation."""
    s = Server(hearth_bin, default_model, *ARGS)
    try:
        c = client_for(s)
        answers = [ask(c, k, p)[0] for k, p in REQUESTS]
        m = metrics(s)
    finally:
        rc, _ = s.stop()
    assert rc == 0
    assert m.get("hearth_spec_drafted_tokens_total", 0) == 0
    return answers


def test_greedy_answers_with_ngram_speculation_are_the_answers_without(hearth_bin, default_model, reference):
    s = Server(hearth_bin, default_model, *ARGS, "--spec", "ngram", "--spec-max", "6")
    try:
        c = client_for(s)
        alone = [ask(c, k, p) for k, p in REQUESTS]
        for i, (text, _) in enumerate(alone):
            assert text == reference[i], f"request {i} alone"
        # The repetitive requests had drafts accepted (their timings say how many).
        assert sum(t.get("accepted_n", 0) for _, t in alone) > 0
        for _, t in alone:
            assert 0 <= t["accepted_n"] <= t["drafted_n"]
        m_alone = metrics(s)
        assert m_alone["hearth_spec_accepted_tokens_total"] > 0
        assert m_alone["hearth_spec_drafted_tokens_total"] >= m_alone["hearth_spec_accepted_tokens_total"]

        # All at once: drafts verified in the same steps as the others' tokens.
        with concurrent.futures.ThreadPoolExecutor(len(REQUESTS)) as ex:
            together = list(ex.map(lambda kp: ask(c, *kp), REQUESTS))
        for i, (text, _) in enumerate(together):
            assert text == reference[i], f"request {i} in the batch"
        m = metrics(s)
        assert m["hearth_spec_accepted_tokens_total"] > m_alone["hearth_spec_accepted_tokens_total"]

        # Streamed, the same text.
        assert stream_text(c, CHAT[0]) == reference[0]

        # "speculative": false: no drafts for that request, the same answer.
        text, t = ask(c, "chat", CHAT[1], speculative=False)
        assert text == reference[1]
        assert t["drafted_n"] == 0 and t["accepted_n"] == 0
    finally:
        rc, _ = s.stop()
    assert rc == 0


def test_bad_spec_options_are_refused(run_hearth, default_model):
    r = run_hearth("serve", "-m", default_model, "--port", "0", "--spec", "medusa")
    assert r.returncode != 0
    assert "--spec" in r.stderr and "medusa" in r.stderr
    r = run_hearth("run", "-m", default_model, "-p", "hi", "--spec", "ngram", "--spec-max", "0")
    assert r.returncode != 0
    assert "--spec-max" in r.stderr


def test_speculative_field_must_be_a_boolean(hearth_bin, default_model):
    s = Server(hearth_bin, default_model, *ARGS, "--spec", "ngram")
    try:
        c = client_for(s)
        with pytest.raises(openai.BadRequestError) as e:
            ask(c, "chat", "hi", speculative="no")
        assert "speculative" in str(e.value)
    finally:
        rc, _ = s.stop()
    assert rc == 0


@pytest.fixture(scope="module")
def tiny_hybrid(tmp_path_factory, shared_dir, hearth_bin):
    """A tiny random Qwen3.5 (hybrid Gated DeltaNet) model as GGUF (serve_util's, as test_hybrid.py's)."""
    return tiny_hybrid_gguf(tiny_hybrid_hf(tmp_path_factory.mktemp("qwen35"), shared_dir), hearth_bin)


def test_hybrid_models_decode_without_speculation_and_say_so(hearth_bin, tiny_hybrid):
    """This part cannot roll back a Gated DeltaNet state: --spec ngram is turned off with one log line,
    and the output is the output without it."""
    def run(*extra):
        p = subprocess.run([str(hearth_bin), "run", "-m", str(tiny_hybrid), "-p", "a b a b a b a b", "-n", "16",
                            "--json", "--threads", "2", *extra], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout), p.stderr

    off, _ = run()
    on, err = run("--spec", "ngram")
    assert on["tokens"] == off["tokens"]
    assert on["drafted_tokens"] == 0
    assert err.count("speculative decoding is off for this model") == 1, err
    s = Server(hearth_bin, tiny_hybrid, "--threads", "2", "--spec", "ngram")
    try:
        c = client_for(s)
        text, t = ask(c, "completions", "a b a b a b a b")
        assert t["drafted_n"] == 0
        assert metrics(s).get("hearth_spec_drafted_tokens_total", 0) == 0
    finally:
        rc, _ = s.stop()
    assert rc == 0
    assert s.stderr().count("speculative decoding is off for this model") == 1
