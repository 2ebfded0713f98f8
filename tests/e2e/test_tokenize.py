"""`hearth tokenize` end to end: the real binary on the default model (SmolLM2 GGUF) and on
the Qwen3 tokenizer.json. Expected ids come from the stored reference fixtures."""
import json
import pathlib

import pytest

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "data" / "tokenizer"


def _cases(name):
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))["cases"]


def _ids(out):
    return [int(x) for x in out.split()]


@pytest.fixture(scope="session")
def qwen_json(shared_dir):
    path = shared_dir / "data" / "tokenizers" / "qwen3" / "tokenizer.json"
    assert path.exists(), path
    return path


# Inputs that survive a command line (no NUL) and are interesting.
PICKS = ["Hello world", "안녕하세요, 세계! 한국어 토크나이저 테스트입니다.", "👨‍👩‍👧‍👦",
         "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "12345678901234567890",
         "<think>\nreasoning\n</think>\n\nanswer"]


@pytest.mark.parametrize("text", PICKS)
def test_ids_match_llama_cpp_on_default_model(run_hearth, default_model, text):
    case = next(c for c in _cases("smollm2_llama.json") if c["text"] == text)
    r = run_hearth("tokenize", "-m", default_model, text)
    assert r.returncode == 0, r.stderr
    assert _ids(r.stdout) == case["ids"]
    r = run_hearth("tokenize", "-m", default_model, "--no-special", text)
    assert r.returncode == 0, r.stderr
    assert _ids(r.stdout) == case["ids_no_special"]


@pytest.mark.parametrize("text", PICKS)
def test_ids_match_hf_on_qwen3_json(run_hearth, qwen_json, text):
    case = next(c for c in _cases("qwen3_hf.json") if c["text"] == text)
    r = run_hearth("tokenize", "-m", qwen_json, text)
    assert r.returncode == 0, r.stderr
    assert _ids(r.stdout) == case["ids"]
    r = run_hearth("tokenize", "-m", qwen_json, "--no-special", text)
    assert _ids(r.stdout) == case["ids_no_special"]


def test_file_input_and_one_line_output(run_hearth, default_model, tmp_path):
    text = "def f(x):\n    return x * 2  # 두 배\n"
    f = tmp_path / "in.txt"
    f.write_text(text, encoding="utf-8")
    r = run_hearth("tokenize", "-m", default_model, "--file", f)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") == 1
    assert r.stdout == run_hearth("tokenize", "-m", default_model, text).stdout


@pytest.mark.parametrize("model", ["default", "qwen"])
def test_decode_round_trip(run_hearth, default_model, qwen_json, model):
    m = default_model if model == "default" else qwen_json
    text = "Round trip: café, 東京, 🦙🦙 and <|im_end|> done."
    ids = run_hearth("tokenize", "-m", m, text).stdout.strip()
    r = run_hearth("tokenize", "-m", m, "--decode", ids)
    assert r.returncode == 0, r.stderr
    assert r.stdout == text + "\n"
    # --no-special with --decode leaves special tokens out
    r = run_hearth("tokenize", "-m", m, "--no-special", "--decode", ids)
    assert r.stdout == text.replace("<|im_end|>", "") + "\n"


def test_pieces(run_hearth, default_model, qwen_json):
    r = run_hearth("tokenize", "-m", default_model, "--pieces", "Hi there\n<|im_end|>")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    ids = _ids(run_hearth("tokenize", "-m", default_model, "Hi there\n<|im_end|>").stdout)
    assert [int(line.split("\t")[0]) for line in lines] == ids
    pieces = [line.split("\t", 1)[1] for line in lines]
    assert pieces == ["Hi", " there", "\\n", "<|im_end|>"]
    # a piece that is part of a UTF-8 character is shown escaped
    r = run_hearth("tokenize", "-m", default_model, "--pieces", " 🦙")
    assert "\\x" in r.stdout
    r = run_hearth("tokenize", "-m", qwen_json, "--pieces", "🦙")
    assert r.stdout == "149955\t🦙\n"


def _one_line_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def test_errors_exit_2_with_one_line(run_hearth, default_model, tmp_path):
    _one_line_error(run_hearth("tokenize", "-m", tmp_path / "missing.gguf", "x"), "missing.gguf", "no such file")
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": {"type": "BPE", "vocab": ', encoding="utf-8")
    _one_line_error(run_hearth("tokenize", "-m", bad, "x"), "[tokenizer]", "tokenizer.json", "malformed")
    _one_line_error(run_hearth("tokenize", "-m", default_model, "--decode", "1 2 49152"),
                    "[tokenizer]", "token id 49152 is out of range")
    _one_line_error(run_hearth("tokenize", "-m", default_model, "--decode", "1 x2"), "'x2' is not a token id")
    _one_line_error(run_hearth("tokenize", "-m", default_model, "--file", tmp_path / "nope.txt"), "nope.txt")
    _one_line_error(run_hearth("tokenize", "-m", default_model), "exactly one of TEXT, --file and --decode")
    notgguf = tmp_path / "x.bin"
    notgguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    _one_line_error(run_hearth("tokenize", "-m", notgguf, "x"), "x.bin")
