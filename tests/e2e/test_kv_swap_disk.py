"""The disk level of preemption by swapping (`hearth serve --kv-disk DIR`, the swap share
--kv-swap-disk-bytes of --kv-disk-bytes) end to end, with the real binary, real model files and a
real HTTP client: a host swap space too small for any preempted sequence (--kv-swap-bytes 1) and a
KV pool (--kv-cache-bytes) far too small for a burst of concurrent greedy requests, so that every
preempted sequence goes to a swap file in DIR and is read back from it. Every answer must equal the
same request run alone on an idle server (never preempted), /metrics must show the disk swaps (none
recomputed), and no swap file may outlive its sequence or the server. A folder made read-only
mid-run sends the sequences back to be recomputed (a log line, a metric), never a wrong answer."""
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest
import requests

from serve_util import Server, metrics
from test_kv_disk import _server_as
from test_kv_swap import HYBRID_BLOCK, LLAMA_BLOCK, PROMPTS, burst, complete, tiny_gguf  # noqa: F401 (a fixture)


def swap_files(folder):
    return sorted(pathlib.Path(folder).rglob("*.swap"))


def swap_folders(folder):
    return sorted(p for p in pathlib.Path(folder).rglob("swap-*") if p.is_dir())


def disk_args(block_bytes, folder):
    return ["--threads", "2", "--ctx", "192", "--max-seqs", "8", "--kv-cache-bytes", str(12 * block_bytes),
            "--kv-swap-bytes", "1", "--kv-disk", str(folder), "--kv-disk-bytes", "1G",
            "--kv-swap-disk-bytes", "512M"]


@pytest.mark.parametrize("which", ["llama", "hybrid"])
def test_sequences_swapped_to_disk_give_the_answers_of_requests_run_alone(hearth_bin, default_model, tiny_gguf,
                                                                         tmp_path, which):
    model, block = (default_model, LLAMA_BLOCK) if which == "llama" else (tiny_gguf, HYBRID_BLOCK)
    folder = tmp_path / "kv"
    s = Server(hearth_bin, model, *disk_args(block, folder))
    try:
        alone = [complete(s, p) for p in PROMPTS]
        assert metrics(s)["hearth_preemptions_total"] == 0, "a request alone should never be preempted"
        assert len(swap_folders(folder)) == 1 and swap_files(folder) == []
        together = burst(s, PROMPTS)
        m = metrics(s)
        status = requests.get(s.url + "/v1/status", timeout=30).json()["kv_swap"]
    finally:
        rc, _ = s.stop()
    assert rc == 0
    for i, (a, t) in enumerate(zip(alone, together)):
        assert t == a, f"request {i}: swapped to disk {t!r} != alone {a!r}"
    assert m["hearth_preemptions_total"] > 0, "the burst should outgrow the KV pool"
    # The host swap space holds nothing: every preemption went to disk and came back.
    assert m["hearth_kv_swap_disk_out_total"] == m["hearth_preemptions_total"]
    assert m["hearth_kv_swap_out_total"] == m["hearth_kv_swap_disk_out_total"]
    assert m["hearth_kv_swap_disk_in_total"] == m["hearth_kv_swap_disk_out_total"]
    assert m["hearth_kv_swap_in_total"] == m["hearth_kv_swap_out_total"]
    assert m["hearth_kv_preemptions_recomputed_total"] == 0
    assert m["hearth_kv_swap_disk_fallbacks_total"] == 0
    assert m["hearth_kv_swap_disk_out_bytes_total"] > 0
    assert m["hearth_kv_swap_disk_in_bytes_total"] == m["hearth_kv_swap_disk_out_bytes_total"]
    assert m["hearth_kv_swap_disk_bytes"] == 0 and m["hearth_kv_swap_bytes"] == 0
    assert m["hearth_kv_swap_disk_capacity_bytes"] == 512 << 20
    assert m["hearth_kv_swap_disk_read_bytes_per_second"] > 0
    assert m["hearth_kv_disk_disabled"] == 0
    assert status["disk_out"] == m["hearth_kv_swap_disk_out_total"] and status["disk_fallbacks"] == 0
    # Private to their sequences: never prefix files, and none outlives the server.
    assert swap_files(folder) == [] and swap_folders(folder) == []


def test_a_crashed_servers_swap_files_are_removed_at_start(hearth_bin, default_model, tmp_path):
    folder = tmp_path / "kv"
    s = Server(hearth_bin, default_model, *disk_args(LLAMA_BLOCK, folder))
    fp = swap_folders(folder)[0].parent
    s.kill()
    # What a crash mid-swap leaves: a swap folder of a process that is gone, with a file in it.
    dead = fp / "swap-999999999"
    dead.mkdir()
    (dead / "0000000000000001.swap").write_bytes(b"x" * 100)
    s = Server(hearth_bin, default_model, *disk_args(LLAMA_BLOCK, folder))
    try:
        assert not dead.exists()
        assert len(swap_folders(folder)) == 1
    finally:
        rc, _ = s.stop()
    assert rc == 0
    assert "removed 1 swap files left by an earlier run" in s.stderr()


def test_a_folder_made_read_only_mid_run_recomputes_instead(hearth_bin, tiny_gguf):
    # The hybrid model: its recomputed answers are exact on the CPU (the default model's may flip a
    # near-tie over 40 tokens, docs/bench/kv-swap.md). Root ignores file modes: the server then runs
    # as nobody, so that the folder's mode counts.
    base = pathlib.Path(tempfile.mkdtemp(prefix="hearth_swap_ro_"))
    try:
        os.chmod(base, 0o755)
        model = base / "tiny.gguf"
        shutil.copy(tiny_gguf, model)
        os.chmod(model, 0o644)
        d = base / "kv"
        d.mkdir()
        prefix = []
        if os.geteuid() == 0:
            os.chown(d, 65534, 65534)
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        s = _server_as(prefix, hearth_bin, model, *disk_args(HYBRID_BLOCK, d))
        try:
            alone = [complete(s, p) for p in PROMPTS]
            folder, = swap_folders(d)
            os.chmod(folder, 0o555)
            together = burst(s, PROMPTS)
            m = metrics(s)
            assert requests.get(s.url + "/health", timeout=10).status_code == 200
        finally:
            rc, _ = s.stop()
        assert rc == 0
        for i, (a, t) in enumerate(zip(alone, together)):
            assert t == a, f"request {i}: {t!r} != alone {a!r}"
        assert m["hearth_preemptions_total"] > 0
        assert m["hearth_kv_swap_disk_fallbacks_total"] >= 1
        assert m["hearth_kv_swap_disk_in_total"] == 0
        assert m["hearth_kv_preemptions_recomputed_total"] == m["hearth_preemptions_total"]
        assert m["hearth_kv_disk_disabled"] == 1
        assert m["hearth_kv_swap_disk_bytes"] == 0
        log = s.stderr()
        assert "its disk swap failed: cannot write " in log and "Permission denied" in log, log[-3000:]
        assert swap_files(d) == []
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_a_swap_share_as_large_as_the_disk_budget_is_refused(hearth_bin, default_model, tmp_path):
    p = subprocess.run([str(hearth_bin), "serve", "-m", str(default_model), "--port", "0", "--kv-disk",
                        str(tmp_path / "kv"), "--kv-disk-bytes", "1G", "--kv-swap-disk-bytes", "2G"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--kv-swap-disk-bytes (2G) must be smaller than --kv-disk-bytes (1G): it is a share of it" in p.stderr

