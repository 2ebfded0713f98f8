"""Speculative decoding with Qwen3.5's own multi-token-prediction head (`--spec mtp`) end to end:
a tiny random Qwen3.5 checkpoint with an MTP head (benchmarks/make_qwen35_model.py --mtp, the real
Qwen3 tokenizer) converted by `hearth convert`, which keeps the head in llama.cpp's nextn layout.
Random weights make the head's drafts wrong nearly always (acceptance means nothing here), so
these tests check what must hold whatever it drafts: the answers are the answers without
speculation (greedy and seeded sampling, long and chunked prompts) while drafts were made and
verified; a file without the head is refused with a message that names it. That the head
computes what Qwen3.5's does is model_mtp_test's part (a plain reference of the block)."""
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def mtp_gguf(tmp_path_factory, shared_dir, hearth_bin):
    d = tmp_path_factory.mktemp("mtp")
    out = {}
    for name, extra in (("mtp", ["--mtp"]), ("plain", [])):
        hf = d / name
        subprocess.run([sys.executable, str(REPO / "benchmarks/make_qwen35_model.py"), str(hf),
                        "--shared", str(pathlib.Path(shared_dir) / "data"),
                        "--hidden", "64", "--layers", "4", "--intermediate", "128", "--heads", "2",
                        "--kv-heads", "1", "--head-dim", "32", "--linear-key-heads", "2",
                        "--linear-key-dim", "16", "--linear-value-dim", "16", "--dtype", "f32",
                        "--std", "0.5", "--seed", "3", *extra],
                       check=True, capture_output=True, text=True, timeout=300)
        gguf = d / f"{name}.gguf"
        p = subprocess.run([str(hearth_bin), "convert", str(hf), "-o", str(gguf), "--type", "f32"],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        if extra:
            assert "kept the multi-token-prediction head (15 tensors, mtp.*) as blk.4.nextn.*" in p.stderr, p.stderr
        out[name] = gguf
    return out


def run(hearth_bin, model, prompt, spec, *extra, n=32):
    p = subprocess.run([str(hearth_bin), "run", "-m", str(model), "-p", prompt, "-n", str(n), "--json",
                        "--threads", "2", "--device", "cpu", "--spec", spec, *extra],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("extra", [
    [],
    ["--prefill-chunk", "5"],
    ["--temp", "0.9", "--seed", "11"],
    ["--spec-max", "2"],
])
def test_run_with_mtp_drafts_answers_as_without(hearth_bin, mtp_gguf, extra):
    prompt = "Tell me about mountains, rivers and the sea, and then about the sky."
    off = run(hearth_bin, mtp_gguf["mtp"], prompt, "off", *extra)
    on = run(hearth_bin, mtp_gguf["mtp"], prompt, "mtp", "--tune", "spec.adaptive=0", *extra)
    assert on["tokens"] == off["tokens"]
    assert len(on["tokens"]) == 32
    # Drafts were made and verified: every step drafted up to --spec-max (the policy off).
    assert on["drafted_tokens"] >= 16, on


def test_the_head_does_not_change_the_model(hearth_bin, mtp_gguf):
    prompt = "Once upon a time"
    a = run(hearth_bin, mtp_gguf["mtp"], prompt, "off")
    b = run(hearth_bin, mtp_gguf["plain"], prompt, "off")
    assert a["tokens"] == b["tokens"]


def test_a_file_without_the_head_is_refused(hearth_bin, mtp_gguf):
    p = subprocess.run([str(hearth_bin), "run", "-m", str(mtp_gguf["plain"]), "-p", "hi", "-n", "4",
                        "--device", "cpu", "--spec", "mtp"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "no multi-token-prediction block" in p.stderr and "plain.gguf" in p.stderr, p.stderr


SERVE_ARGS = ["--threads", "2", "--ctx", "512", "--max-seqs", "3", "--prefill-chunk", "16"]
PROMPTS = ["Tell me about mountains, rivers and the sea.", "Write a list of colours.",
           "What is the capital of France?", "Count from one to twenty, slowly and carefully, please."]


def serve_answers(hearth_bin, model, *extra, concurrent_too=True):
    """(alone, together, metrics): each prompt's answer alone, then all at once (more prompts
    than sequences: some wait), greedy and one seeded sampled request."""
    import concurrent.futures

    import openai

    from serve_util import Server, metrics
    s = Server(hearth_bin, model, *SERVE_ARGS, *extra)
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=600)

        def one(i):
            sampled = i == len(PROMPTS) - 1
            r = c.chat.completions.create(model="default", messages=[{"role": "user", "content": PROMPTS[i]}],
                                          max_tokens=24, temperature=0.8 if sampled else 0, seed=5 if sampled else None)
            return r.choices[0].message.content, r.model_extra.get("timings", {})
        alone = [one(i) for i in range(len(PROMPTS))]
        together = []
        if concurrent_too:
            with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as ex:
                together = list(ex.map(one, range(len(PROMPTS))))
        m = metrics(s)
    finally:
        rc, _ = s.stop()
    assert rc == 0
    return alone, together, m


def test_serve_with_mtp_drafts_answers_as_without(hearth_bin, mtp_gguf):
    ref, _, m0 = serve_answers(hearth_bin, mtp_gguf["mtp"], concurrent_too=False)
    assert m0.get("hearth_spec_drafted_tokens_total", 0) == 0
    alone, together, m = serve_answers(hearth_bin, mtp_gguf["mtp"], "--spec", "mtp", "--spec-max", "3",
                                       "--tune", "spec.adaptive=0")
    assert [a for a, _ in alone] == [a for a, _ in ref]
    assert [a for a, _ in together] == [a for a, _ in ref]
    assert all(t["drafted_n"] > 0 for _, t in alone), alone
    assert m["hearth_spec_drafted_tokens_total"] >= sum(t["drafted_n"] for _, t in alone)


def test_serve_refuses_mtp_without_the_head(hearth_bin, mtp_gguf):
    p = subprocess.run([str(hearth_bin), "serve", "-m", str(mtp_gguf["plain"]), "--port", "0", "--device", "cpu",
                        "--spec", "mtp"], capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "no multi-token-prediction block" in p.stderr, p.stderr
