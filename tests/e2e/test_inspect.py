"""`hearth inspect` on real GGUF files and on broken ones."""
import re

import pytest


def test_inspect_default_model(run_hearth, default_model):
    r = run_hearth("inspect", default_model)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"file:           {default_model}" in out
    assert re.search(r"^format:\s+GGUF v3, \d+ bytes", out, re.M)
    assert re.search(r"^architecture:\s+llama$", out, re.M)
    assert re.search(r"^\s+llama\.block_count\s+30$", out, re.M)
    assert re.search(r"^\s+llama\.embedding_length\s+576$", out, re.M)
    assert re.search(r"^\s+llama\.attention\.head_count_kv\s+3$", out, re.M)
    assert re.search(r"^\s+llama\.attention\.layer_norm_rms_epsilon\s+1e-05$", out, re.M)
    assert re.search(r"^tokenizer:\s+gpt2 \(pre: smollm\), 49152 tokens, bos 1, eos 2", out, re.M)
    assert re.search(r"^chat template:\s+present \(\d+ bytes\)$", out, re.M)
    assert re.search(r"^tensors:\s+272$", out, re.M)
    assert re.search(r"^parameters:\s+134515008 ", out, re.M)
    # Size by type: every type's tensor count, and the counts add up.
    counts = {m.group(1): int(m.group(2))
              for m in re.finditer(r"^\s+(\w+)\s+(\d+) tensors\s+\d+ bytes", out, re.M)}
    assert set(counts) == {"f32", "q4_1", "q8_0"}
    assert sum(counts.values()) == 272
    assert "tensor list" not in out


def test_inspect_tensors_lists_every_tensor(run_hearth, default_model):
    r = run_hearth("inspect", default_model, "--tensors")
    assert r.returncode == 0, r.stderr
    listing = r.stdout.split("tensor list", 1)[1].splitlines()[1:]
    row_re = re.compile(r"^\s+(\S+)\s+(f32|q4_1|q8_0)\s+\[[\d, ]+\]\s+(\d+)\s+(\d+)$")
    rows = [row_re.match(line) for line in listing]
    assert all(rows), listing
    names = [row.group(1) for row in rows]
    assert len(names) == 272 and len(set(names)) == 272
    assert "token_embd.weight" in names and "output_norm.weight" in names
    for layer in range(30):
        assert f"blk.{layer}.attn_q.weight" in names
    emb = next(line for line in r.stdout.splitlines() if line.strip().startswith("token_embd.weight"))
    assert re.search(r"token_embd\.weight\s+q8_0\s+\[576, 49152\]\s+0\s+30081024", emb)


def test_inspect_metadata_dump(run_hearth, default_model):
    r = run_hearth("inspect", default_model, "--metadata")
    assert r.returncode == 0, r.stderr
    assert "general.architecture: string = \"llama\"" in r.stdout
    assert re.search(r"tokenizer\.ggml\.tokens: array = \[string x 49152: ", r.stdout)
    assert len(r.stdout) < 20000  # arrays are summarised, not dumped


def test_inspect_shared_vocab_files(run_hearth, shared_dir):
    files = sorted((shared_dir / "data" / "tokenizer-test").glob("*.gguf"))
    assert len(files) >= 10
    for path in files:
        r = run_hearth("inspect", path, "--tensors", "--metadata")
        assert r.returncode == 0, f"{path}: {r.stderr}"
        assert re.search(r"^tensors:\s+0$", r.stdout, re.M), path
        assert re.search(r"^tokenizer:\s+\w+.*\d+ tokens", r.stdout, re.M), path


def _one_line_error(r, path):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("hearth: ")
    assert str(path) in lines[0]
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr
    return lines[0]


def test_inspect_truncated_copy(run_hearth, default_model, tmp_path):
    data = default_model.read_bytes()
    for cut, field in [(len(data) - 1000, "extends past end of file"), (100000, "'tokenizer.ggml.tokens': array count 49152"),
                       (500000, "'tokenizer.ggml.tokens'["),
                       (20, "header"), (0, "magic truncated")]:
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        line = _one_line_error(run_hearth("inspect", path), path)
        assert field in line, line
        assert f"file size {cut}" in line, line


def test_inspect_bad_magic(run_hearth, tmp_path):
    path = tmp_path / "notgguf.bin"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    line = _one_line_error(run_hearth("inspect", path), path)
    assert "bad magic" in line and "(offset 0," in line


def test_inspect_unsupported_version(run_hearth, default_model, tmp_path):
    data = bytearray(default_model.read_bytes()[:4096])
    data[4:8] = (1).to_bytes(4, "little")
    path = tmp_path / "v1.gguf"
    path.write_bytes(bytes(data))
    line = _one_line_error(run_hearth("inspect", path), path)
    assert "unsupported version 1" in line


def test_inspect_missing_file_and_directory(run_hearth, tmp_path):
    missing = tmp_path / "nope.gguf"
    _one_line_error(run_hearth("inspect", missing), missing)
    _one_line_error(run_hearth("inspect", tmp_path), tmp_path)


@pytest.mark.parametrize("args", [["inspect"], ["inspect", "a.gguf", "--bogus"]])
def test_inspect_bad_usage(run_hearth, args):
    r = run_hearth(*args)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
