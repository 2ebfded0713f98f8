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

from serve_util import Server, http_post, metrics, tiny_hybrid_gguf, tiny_hybrid_hf


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
    # The policy's measured costs may stop drafting in the batch on a loaded machine; this
    # test is about verification inside a batch, so drafting stays on.
    s = Server(hearth_bin, default_model, *ARGS, "--spec", "ngram", "--spec-max", "6", "--tune", "spec.adaptive=0")
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


def test_seeded_sampled_answers_with_speculation_are_the_answers_without(hearth_bin, default_model, run_hearth):
    """Sampled requests speculate too (rejection sampling done with the sampler's own random number
    per token): with a seed, the same text with and without speculation, alone and concurrently,
    with drafts accepted; another seed gives another text. `hearth run --temp --seed` likewise."""
    samplings = [dict(temperature=0.7, seed=1), dict(temperature=1.0, seed=2, top_p=0.9),
                 dict(temperature=0.5, seed=3, extra_body={"min_p": 0.1, "top_k": 20}),
                 dict(temperature=0.8, seed=4, presence_penalty=0.3)]

    def answers(*extra):
        s = Server(hearth_bin, default_model, *ARGS, *extra)
        try:
            c = client_for(s)

            def one(i):
                r = c.chat.completions.create(model="default", messages=[{"role": "user", "content": CHAT[i % 2]}],
                                              max_tokens=MAX_TOKENS, **samplings[i])
                return r.choices[0].message.content, r.model_extra.get("timings", {})
            alone = [one(i) for i in range(len(samplings))]
            with concurrent.futures.ThreadPoolExecutor(len(samplings)) as ex:
                together = list(ex.map(one, range(len(samplings))))
            other = c.chat.completions.create(model="default", messages=[{"role": "user", "content": CHAT[1]}],
                                              max_tokens=MAX_TOKENS, temperature=1.0, seed=77, top_p=0.9)
        finally:
            rc, _ = s.stop()
        assert rc == 0
        return alone, together, other.choices[0].message.content

    ref, ref_together, _ = answers()
    alone, together, other = answers("--spec", "ngram", "--spec-max", "6", "--tune", "spec.adaptive=0")
    assert [a for a, _ in alone] == [a for a, _ in ref]
    assert [a for a, _ in together] == [a for a, _ in ref]
    assert [a for a, _ in ref_together] == [a for a, _ in ref]
    assert sum(t["accepted_n"] for _, t in alone + together) > 0
    assert other != ref[1][0]

    def run(*extra):
        r = run_hearth("run", "-m", default_model, "-p", CHAT[0], "-n", "48", "--temp", "0.7", "--seed", "9",
                       "--json", "--threads", "2", *extra)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    off, on = run(), run("--spec", "ngram")
    assert on["tokens"] == off["tokens"]
    assert on["accepted_tokens"] > 0


def test_a_model_drafting_for_itself_gives_the_answers_without(hearth_bin, default_model, reference, run_hearth):
    """--spec draft --draft-model: the default model drafting for itself (the exactness test of a draft
    model: it proposes what it decodes) gives the answers without speculation, alone and concurrently,
    with nearly every drafted token accepted; `hearth run` likewise. (--tune spec.adaptive=0: a draft
    model as dear as the target never pays, so the measured policy would soon stop drafting.)"""
    s = Server(hearth_bin, default_model, *ARGS, "--spec", "draft", "--draft-model", default_model, "--spec-max", "4",
               "--tune", "spec.adaptive=0")
    try:
        c = client_for(s)
        alone = [ask(c, k, p) for k, p in REQUESTS]
        for i, (text, _) in enumerate(alone):
            assert text == reference[i], f"request {i} alone"
        with concurrent.futures.ThreadPoolExecutor(len(REQUESTS)) as ex:
            together = list(ex.map(lambda kp: ask(c, *kp), REQUESTS))
        for i, (text, _) in enumerate(together):
            assert text == reference[i], f"request {i} in the batch"
        m = metrics(s)
        assert m["hearth_spec_drafted_tokens_total"] > 50
        assert m["hearth_spec_accepted_tokens_total"] >= 0.9 * m["hearth_spec_drafted_tokens_total"]
    finally:
        rc, _ = s.stop()
    assert rc == 0
    assert "draft model" in s.stderr()

    def run(*extra):
        r = run_hearth("run", "-m", default_model, "-p", CHAT[2], "-n", "32", "--json", "--threads", "2", *extra)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    off, on = run(), run("--spec", "draft", "--draft-model", default_model, "--tune", "spec.adaptive=0")
    assert on["tokens"] == off["tokens"]
    assert on["accepted_tokens"] >= 0.9 * on["drafted_tokens"] > 20
    # With the measured policy: the draft model costs as much as the target, so drafting soon
    # stops (a few drafts measure it); the output is the same.
    adaptive = run("--spec", "draft", "--draft-model", default_model)
    assert adaptive["tokens"] == off["tokens"]
    assert adaptive["drafted_tokens"] < on["drafted_tokens"]


def test_bad_spec_options_are_refused(run_hearth, default_model):
    r = run_hearth("serve", "-m", default_model, "--port", "0", "--spec", "medusa")
    assert r.returncode != 0
    assert "--spec" in r.stderr and "medusa" in r.stderr
    r = run_hearth("run", "-m", default_model, "-p", "hi", "--spec", "ngram", "--spec-max", "0")
    assert r.returncode != 0
    assert "--spec-max" in r.stderr
    for cmd in (["run", "-p", "hi"], ["serve", "--port", "0"]):
        r = run_hearth(cmd[0], "-m", default_model, *cmd[1:], "--spec", "draft")
        assert r.returncode != 0 and "--draft-model" in r.stderr, r.stderr
        r = run_hearth(cmd[0], "-m", default_model, *cmd[1:], "--spec", "ngram", "--draft-model", default_model)
        assert r.returncode != 0 and "--draft-model" in r.stderr, r.stderr


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


def test_speculative_false_on_every_route(hearth_bin, default_model):
    """Hearth's "speculative" request field works on the Anthropic Messages and Responses routes as
    on chat / completions: false drafts nothing for that request (the metrics' drafted total does
    not move), true (the default) drafts; a value that is not a boolean is a 400 naming it.
    (--tune spec.adaptive=0: whether a request drafts must not depend on the machine's step times.)"""
    s = Server(hearth_bin, default_model, *ARGS, "--spec", "ngram", "--spec-max", "6", "--tune", "spec.adaptive=0")
    prompt = CHAT[1]
    bodies = {
        "/v1/messages": {"model": "default", "max_tokens": 48, "temperature": 0,
                         "messages": [{"role": "user", "content": prompt}]},
        "/v1/responses": {"model": "default", "max_output_tokens": 48, "temperature": 0, "input": prompt},
        "/v1/chat/completions": {"model": "default", "max_tokens": 48, "temperature": 0,
                                 "messages": [{"role": "user", "content": prompt}]},
    }
    try:
        for path, body in bodies.items():
            before = metrics(s).get("hearth_spec_drafted_tokens_total", 0)
            r = http_post(s.url + path, json={**body, "speculative": False}, timeout=300)
            assert r.status_code == 200, (path, r.text)
            assert metrics(s).get("hearth_spec_drafted_tokens_total", 0) == before, path
            r = http_post(s.url + path, json=body, timeout=300)
            assert r.status_code == 200, (path, r.text)
            assert metrics(s).get("hearth_spec_drafted_tokens_total", 0) > before, path
            r = http_post(s.url + path, json={**body, "speculative": "no"}, timeout=60)
            assert r.status_code == 400, (path, r.text)
            assert "speculative" in r.text, (path, r.text)
    finally:
        rc, _ = s.stop()
    assert rc == 0


@pytest.fixture(scope="module")
def tiny_hybrid(tmp_path_factory, shared_dir, hearth_bin):
    """A tiny random Qwen3.5 (hybrid Gated DeltaNet) model as GGUF (serve_util's, as test_hybrid.py's)."""
    return tiny_hybrid_gguf(tiny_hybrid_hf(tmp_path_factory.mktemp("qwen35"), shared_dir), hearth_bin)


def test_hybrid_models_speculate_with_the_output_without_it(hearth_bin, tiny_hybrid):
    """A hybrid (Gated DeltaNet) model drafts too: its recurrent state is checkpointed after each
    verified row and rolled back to the last accepted token, so greedy output with --spec ngram is
    the output without it, in `hearth run` and through the server, alone and concurrently.

    The random tiny model never continues a prompt-lookup draft by itself, so the requests make
    it happen: a reasoning budget of 3 forces the closing "\n</think>\n\n" while the user's text
    holds "\n</think>\n\n" followed by other words; after the forced "</think>" the drafter proposes
    "\n\n" and those words, the forced "\n\n" is accepted and the model's next choice rejects the
    rest: a partial acceptance, whose state must be rolled back exactly."""
    def run(*extra):
        p = subprocess.run([str(hearth_bin), "run", "-m", str(tiny_hybrid), "-p", "a b a b a b a b", "-n", "24",
                            "--json", "--threads", "2", *extra], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout), p.stderr

    off, _ = run()
    on, err = run("--spec", "ngram", "--spec-max", "4")
    assert on["tokens"] == off["tokens"]
    assert "speculative decoding is off" not in err
    users = ["abc\n</think>\n\nfoo bar baz", "one two\n</think>\n\nthree four five six",
             "x y z\n</think>\n\nx y z", "hello\n</think>\n\nworld again and again"]

    def answers(*extra):
        s = Server(hearth_bin, tiny_hybrid, "--threads", "2", "--max-seqs", "4", "--reasoning-budget", "3",
                   "--chat-template-kwargs", '{"enable_thinking": true}', *extra)
        try:
            c = client_for(s)

            def chat(u):
                r = c.chat.completions.create(model="default", messages=[{"role": "user", "content": u}],
                                              max_tokens=16, temperature=0)
                m = r.choices[0].message
                return (m.content, m.model_extra.get("reasoning_content")), r.model_extra["timings"]
            alone = [chat(u) for u in users]
            with concurrent.futures.ThreadPoolExecutor(len(users)) as ex:
                together = list(ex.map(chat, users))
            m = metrics(s)
        finally:
            rc, _ = s.stop()
        assert rc == 0
        return alone, together, m, s.stderr()

    ref_alone, ref_together, _, _ = answers()
    alone, together, m, err = answers("--spec", "ngram", "--spec-max", "4")
    assert [a for a, _ in alone] == [a for a, _ in ref_alone]
    assert [a for a, _ in together] == [a for a, _ in ref_alone]
    assert [a for a, _ in ref_together] == [a for a, _ in ref_alone]
    timings = [t for _, t in alone + together]
    assert sum(t["accepted_n"] for t in timings) > 0
    assert sum(t["drafted_n"] for t in timings) > sum(t["accepted_n"] for t in timings)
    assert m.get("hearth_spec_accepted_tokens_total", 0) > 0
    assert "speculation checkpoint slots" in err
    assert "speculative decoding is off" not in err


def test_an_unsuitable_draft_model_is_refused(run_hearth, default_model, tiny_hybrid):
    """A draft model with recurrent layers (or another vocabulary) is refused at start, naming why."""
    r = run_hearth("run", "-m", default_model, "-p", "hi", "--spec", "draft", "--draft-model", tiny_hybrid)
    assert r.returncode != 0
    assert "recurrent" in r.stderr, r.stderr
    r = run_hearth("run", "-m", tiny_hybrid, "-p", "hi", "--spec", "draft", "--draft-model", default_model)
    assert r.returncode != 0
    assert "vocabulary" in r.stderr, r.stderr
