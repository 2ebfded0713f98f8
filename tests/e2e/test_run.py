"""`hearth run` on the real default model: llama.cpp's greedy tokens, the statistics lines,
--json / --logprobs, seeds, and clean errors."""
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
REF = json.loads((ROOT / "tests/data/llama_ref/smollm2-135m-q4_1.json").read_text(encoding="utf-8"))
N_STEPS = 12


def run_json(run_hearth, *args):
    r = run_hearth("run", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("case", [0, 2, 5, 6], ids=lambda i: f"prompt{i}")
def test_greedy_tokens_match_llama_cpp(run_hearth, default_model, case):
    """Our tokenizer gives llama.cpp's prompt ids and our engine its greedy tokens."""
    c = REF["cases"][case]
    # The fixture was recorded with an f32 KV cache: compare on the same cache type.
    out = run_json(run_hearth, "-m", default_model, "--raw", "-p", c["prompt"], "-n", N_STEPS, "--temp", "0",
                   "--kv-type", "f32")
    assert out["prompt_ids"] == c["prompt_ids"]
    want = c["greedy_ids"][:N_STEPS]
    assert out["tokens"] == want[: len(out["tokens"])]
    if out["stop_reason"] == "length":
        assert len(out["tokens"]) == N_STEPS


def test_kv_type_option(run_hearth, default_model):
    a = run_json(run_hearth, "-m", default_model, "-p", "Hi", "-n", "3", "--kv-type", "f32")
    b = run_json(run_hearth, "-m", default_model, "-p", "Hi", "-n", "3")
    assert a["kv_type"] == "f32" and b["kv_type"] == "f16"
    bad = run_hearth("run", "-m", default_model, "-p", "Hi", "--kv-type", "q8")
    assert bad.returncode == 2 and "--kv-type must be f16, f32 or q8_0" in bad.stderr


def test_statistics_lines(run_hearth, default_model):
    r = run_hearth("run", "-m", default_model, "-p", "Say hello.", "-n", "8")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()[-3:]
    assert re.fullmatch(r"Prompt: \d+ tokens, \d+\.\d{3} tokens-per-sec", lines[0]), lines
    assert re.fullmatch(r"Generation: \d+ tokens, \d+\.\d{3} tokens-per-sec", lines[1]), lines
    assert re.fullmatch(r"Peak memory: \d+\.\d{3} GB", lines[2]), lines
    n_prompt = int(re.search(r"Prompt: (\d+)", lines[0]).group(1))
    assert n_prompt > 10  # the chat template wrapped the prompt
    peak = float(re.search(r"([\d.]+) GB", lines[2]).group(1))
    assert 0.05 < peak < 2.0


def test_default_model_is_found_without_m(run_hearth):
    out = run_json(run_hearth, "-p", "Hi", "-n", "2")
    assert out["model"].endswith(".gguf")
    assert out["prompt_tokens"] > 0


def test_json_fields_and_logprobs(run_hearth, default_model):
    out = run_json(run_hearth, "-m", default_model, "-p", "Count to five.", "-n", "6", "--logprobs", "3")
    for key in ("text", "tokens", "prompt_tokens", "prompt_tps", "generation_tps", "ttft_ms", "peak_memory_gb",
                "stop_reason", "seed", "logprobs"):
        assert key in out, key
    assert out["stop_reason"] in ("stop", "length")
    assert len(out["logprobs"]) == len(out["tokens"])
    for step, tok in zip(out["logprobs"], out["tokens"]):
        assert step["token"] == tok
        assert len(step["top_logprobs"]) == 3
        assert step["top_logprobs"][0]["token"] == tok  # greedy: the chosen token is the most likely
        assert step["logprob"] <= 0.0
        assert abs(step["logprob"] - step["top_logprobs"][0]["logprob"]) < 1e-5
    assert out["prompt_tps"] > 0 and out["ttft_ms"] > 0


def test_same_seed_same_output(run_hearth, default_model):
    args = ["-m", default_model, "-p", "Write a short poem about the sea.", "-n", "24", "--temp", "0.9",
            "--top-k", "0", "--top-p", "1", "--min-p", "0"]
    a = run_json(run_hearth, *args, "--seed", "42")
    b = run_json(run_hearth, *args, "--seed", "42")
    assert a["tokens"] == b["tokens"]
    assert a["seed"] == 42


def test_stops_at_the_context_limit(run_hearth, default_model):
    r = run_hearth("run", "-m", default_model, "--raw", "-p", "One two three four five", "-n", "100", "--ctx", "16",
                   "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["stop_reason"] == "context"
    # All 16 positions are used; the logits of the last one still give one more token.
    assert out["prompt_tokens"] + len(out["tokens"]) == 16 + 1
    assert "context limit" in r.stderr


@pytest.mark.parametrize("args,needle", [
    (["-m", "/nonexistent/model.gguf", "-p", "x"], "/nonexistent/model.gguf"),
    (["--ctx", "8", "--raw", "-p", "a long prompt that has more than eight tokens in it for sure"], "does not fit"),
    (["-p", "x", "--top-p", "0"], "top_p"),
    (["-p", "x", "--temp", "-1"], "temperature"),
    ([], "no prompt"),
])
def test_bad_input_is_a_one_line_error(run_hearth, default_model, args, needle):
    full = list(args)
    if "-m" not in full:
        full = ["-m", str(default_model)] + full
    r = run_hearth("run", *full)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr


def test_unsupported_architecture_is_refused(run_hearth, shared_dir):
    vocab_only = shared_dir / "data/tokenizer-test/ggml-vocab-gpt-2.gguf"
    r = run_hearth("run", "-m", vocab_only, "--raw", "-p", "x")
    assert r.returncode == 2
    assert "architecture" in r.stderr and "not supported" in r.stderr


def test_deterministic_flag_on_the_cpu(run_hearth, default_model):
    """--deterministic: the CPU back-end is batch-invariant already, so the flag is accepted,
    says so, and changes no token (same greedy ids and log-probabilities as without it)."""
    args = ["-m", default_model, "-p", "Name three colours.", "-n", "6", "--temp", "0", "--device", "cpu"]
    plain = run_json(run_hearth, *args)
    r = run_hearth("run", *args, "--deterministic", "--json")
    assert r.returncode == 0, r.stderr
    assert "deterministic: batch-invariant kernels on cpu" in r.stderr
    assert json.loads(r.stdout)["tokens"] == plain["tokens"]
