"""`hearth convert` and `-m HF_FOLDER` with the real binary on the tiny Qwen3.5 fixtures."""
import pathlib
import shutil

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "qwen35"


@pytest.mark.parametrize("name,arch", [("dense", "qwen35"), ("moe", "qwen35moe"), ("next", "qwen3next")])
@pytest.mark.parametrize("ty", [None, "f16", "q8_0", "q4_k"])
def test_convert_writes_a_gguf_that_inspect_reads(run_hearth, tmp_path, name, arch, ty):
    out = tmp_path / f"{name}.gguf"
    args = ["convert", str(DATA / name), "-o", str(out)] + (["--type", ty] if ty else [])
    r = run_hearth(*args)
    assert r.returncode == 0, r.stderr
    assert f"{arch}," in r.stdout and "tensors" in r.stdout, r.stdout
    assert "no tokenizer.json" in r.stderr
    assert out.stat().st_size > 100_000
    r = run_hearth("inspect", str(out))
    assert r.returncode == 0, r.stderr
    assert arch in r.stdout


def test_inspect_reads_an_hf_folder_directly(run_hearth):
    r = run_hearth("inspect", str(DATA / "moe"), "--tensors")
    assert r.returncode == 0, r.stderr
    assert "blk.0.ffn_gate_exps.weight" in r.stdout
    assert "blk.0.ssm_conv1d.weight" in r.stdout


def test_convert_errors_name_the_file(run_hearth, tmp_path):
    r = run_hearth("convert", str(tmp_path), "-o", str(tmp_path / "x.gguf"))
    assert r.returncode == 2
    assert "config.json" in r.stderr
    bad = tmp_path / "bad"
    shutil.copytree(DATA / "dense", bad)
    (bad / "model.safetensors").unlink()
    r = run_hearth("convert", str(bad), "-o", str(tmp_path / "x.gguf"))
    assert r.returncode == 2
    assert "safetensors" in r.stderr
    r = run_hearth("convert", str(DATA / "dense"), "-o", str(tmp_path / "x.gguf"), "--type", "q2_k")
    assert r.returncode == 2
    assert "--type 'q2_k'" in r.stderr
