"""The KV disk tier (`hearth serve --kv-disk DIR --kv-disk-bytes SIZE`) end to end, with the real
binary and real model files: the default (Llama-family) model and a tiny hybrid Qwen3.5 model
(Gated DeltaNet layers, whose recurrent-state snapshots go to disk too). A small --kv-cache-bytes
forces prefix blocks out of memory. Greedy outputs must be the same whether a prefix came from
memory, from disk, or was recomputed; a restarted server finds an earlier conversation on disk;
damaged files, a full disk budget and a folder made read-only mid-run never crash the server or
change an answer, and each says so in the log."""
import concurrent.futures
import os
import pathlib
import shutil
import struct
import subprocess
import tempfile
import zlib

import pytest
import requests
from openai import OpenAI

from serve_util import Server, metrics, tiny_hybrid_gguf, tiny_hybrid_hf


# The default model's KV block (SmolLM2-135M: 30 layers, 3 KV heads of 64, f16): 368,640 bytes of
# 16 tokens. 18 MiB hold about 51 blocks: one prompt of ~530 tokens and part of another.
LLAMA_ARGS = ["--threads", "2", "--ctx", "700", "--max-seqs", "1", "--kv-cache-bytes", "18M"]

HYBRID_KV_BYTES = "104448"  # the tiny hybrid model: 51 blocks of 2,048 bytes, like LLAMA_ARGS

P = " ".join(f"Item {i} is a red apple." for i in range(60))  # ~530 tokens
Q = " ".join(f"Note {i}: the sky is blue today." for i in range(50))  # ~500 tokens, evicts most of P


def complete(server, prompt, n=12):
    r = requests.post(server.url + "/v1/completions",
                      json={"prompt": prompt, "max_tokens": n, "temperature": 0}, timeout=600)
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["text"], j["timings"]


def kv_files(folder):
    return sorted(p for p in pathlib.Path(folder).rglob("*.kv"))


def fingerprint_dirs(folder):
    return [p for p in pathlib.Path(folder).iterdir() if p.is_dir()]


@pytest.fixture(scope="module")
def cold_answers(hearth_bin, default_model):
    """P and Q answered by a server without the disk tier, nothing cached: the recomputed truth."""
    s = Server(hearth_bin, default_model, *LLAMA_ARGS)
    try:
        return {"P": complete(s, P)[0], "Q": complete(s, Q)[0]}
    finally:
        s.stop()


def test_llama_prefix_from_memory_disk_or_recomputed_gives_the_same_tokens(hearth_bin, default_model, tmp_path,
                                                                           cold_answers):
    s = Server(hearth_bin, default_model, *LLAMA_ARGS, "--kv-disk", tmp_path / "kv")
    try:
        first, t = complete(s, P)
        assert t["cached_n"] == 0 and t["cached_disk_n"] == 0
        again, t = complete(s, P)
        assert t["cached_n"] > 500 and t["cached_disk_n"] == 0  # memory
        assert complete(s, Q)[0] == cold_answers["Q"]  # pushes P's blocks out to disk
        from_disk, t = complete(s, P)
        assert t["cached_n"] > 500, t
        assert t["cached_disk_n"] > 0, t  # some of them came back from disk
        assert first == again == from_disk == cold_answers["P"]
        m = metrics(s)
        assert m["hearth_kv_disk_writes_total"] > 0
        assert m["hearth_kv_disk_hits_total"] * 16 >= t["cached_disk_n"]
        assert m["hearth_kv_disk_prompt_tokens_total"] == t["cached_disk_n"]
        assert m["hearth_kv_disk_read_seconds_count"] == 1
        assert m["hearth_kv_disk_blocks"] == len(kv_files(tmp_path / "kv")) > 0
        assert m["hearth_kv_disk_bytes"] > 0 and m["hearth_kv_disk_disabled"] == 0
        # The web page's status route shows the same tier.
        disk = requests.get(s.url + "/v1/status", timeout=30).json()["kv_disk"]
        assert disk["blocks"] == m["hearth_kv_disk_blocks"] and disk["bytes"] == m["hearth_kv_disk_bytes"]
        assert disk["hit_tokens"] == t["cached_disk_n"] and disk["disabled"] is False
    finally:
        rc, _ = s.stop()
    assert rc == 0


def agent_turns():
    tools = "\n".join(f"- tool_{i}(path: string, limit: int): reads part {i} of the project and reports "
                      f"what it found about module {i}." for i in range(40))
    system = "You are a coding agent working in a repository. You can call these tools:\n" + tools
    return [{"role": "system", "content": system},
            {"role": "user", "content": "List the modules that handle parsing."},
            {"role": "assistant", "content": "I will call tool_3 and tool_7 to look at the parsers."},
            {"role": "user", "content": "tool_3 says: module 3 parses JSON. tool_7 says: module 7 parses YAML."}]


def chat(server, messages, n=12):
    client = OpenAI(base_url=server.url + "/v1", api_key="x")
    r = client.chat.completions.create(model="m", messages=messages, max_tokens=n, temperature=0)
    return r, r.model_extra["timings"]


@pytest.mark.parametrize("which", ["llama", "hybrid"])
def test_a_restarted_server_finds_the_conversation_on_disk(hearth_bin, default_model, tiny_gguf, tmp_path, which):
    model = default_model if which == "llama" else tiny_gguf
    args = ["--threads", "2", "--ctx", "2048", "--model-id", "m"]
    msgs = agent_turns()
    s = Server(hearth_bin, model, *args, "--kv-disk", tmp_path / "kv")
    try:
        r1, _ = chat(s, msgs)
        p1 = r1.usage.prompt_tokens
        assert p1 > 600
    finally:
        rc, _ = s.stop()
    assert rc == 0
    assert "at shutdown" in s.stderr()  # memory's prefix blocks went to disk on the way out
    msgs = msgs + [{"role": "assistant", "content": r1.choices[0].message.content},
                   {"role": "user", "content": "Now summarise what you found."}]
    s = Server(hearth_bin, model, *args, "--kv-disk", tmp_path / "kv")
    try:
        r2, t2 = chat(s, msgs)
    finally:
        s.stop()
    cached = r2.usage.prompt_tokens_details.cached_tokens
    # The earlier turns (the first request's prompt, up to its last whole block; a hybrid model
    # resumes from the snapshot at that prompt's last block boundary) came from disk.
    assert cached >= p1 - 32, (cached, p1, r2.usage.prompt_tokens)
    assert t2["cached_disk_n"] == cached
    cold = Server(hearth_bin, model, *args)
    try:
        r3, t3 = chat(cold, msgs)
    finally:
        cold.stop()
    assert t3["cached_n"] == 0
    assert r3.choices[0].message.content == r2.choices[0].message.content


@pytest.fixture(scope="module")
def filled_dir(hearth_bin, default_model, tmp_path_factory, cold_answers):
    """A folder holding P's blocks, written by a server at its shutdown."""
    d = tmp_path_factory.mktemp("filled") / "kv"
    s = Server(hearth_bin, default_model, *LLAMA_ARGS, "--kv-disk", d)
    try:
        assert complete(s, P)[0] == cold_answers["P"]
    finally:
        s.stop()
    assert len(kv_files(d)) >= 32
    return d


def test_requests_beside_a_disk_read_are_not_held_up_and_agree(hearth_bin, default_model, filled_dir, tmp_path,
                                                               cold_answers):
    # P's prefix comes back from disk while Q (nothing cached) and a second P run beside it.
    d = tmp_path / "kv"
    shutil.copytree(filled_dir, d)
    s = Server(hearth_bin, default_model, "--threads", "2", "--ctx", "700", "--max-seqs", "4",
               "--kv-cache-bytes", "48M", "--kv-disk", d)
    try:
        with concurrent.futures.ThreadPoolExecutor(3) as ex:
            got = list(ex.map(lambda p: complete(s, p), [P, Q, P]))
        assert [g[0] for g in got] == [cold_answers["P"], cold_answers["Q"], cold_answers["P"]]
        assert got[1][1]["cached_disk_n"] == 0
        assert max(got[0][1]["cached_disk_n"], got[2][1]["cached_disk_n"]) > 500
        assert metrics(s)["hearth_kv_disk_read_seconds_count"] >= 1
    finally:
        rc, _ = s.stop()
    assert rc == 0


def corrupt(path):
    b = bytearray(path.read_bytes())
    b[len(b) // 2] ^= 0x10
    path.write_bytes(bytes(b))


def truncate(path):
    b = path.read_bytes()
    path.write_bytes(b[:len(b) // 3])


def foreign(path):
    # Another server's file: a whole, valid header with another fingerprint (checksum redone).
    b = bytearray(path.read_bytes())
    b[16:24] = struct.pack("<Q", 0x0123456789ABCDEF)
    b[60:64] = struct.pack("<I", zlib.crc32(bytes(b[:60])))
    path.write_bytes(bytes(b))


@pytest.mark.parametrize("damage,message", [(corrupt, "checksum mismatch (corrupt)"),
                                            (truncate, "torn: "),
                                            (foreign, "foreign: fingerprint 0123456789abcdef")])
def test_damaged_files_are_removed_never_loaded(hearth_bin, default_model, filled_dir, tmp_path, cold_answers,
                                                damage, message):
    d = tmp_path / "kv"
    shutil.copytree(filled_dir, d)
    files = kv_files(d)
    for f in files:
        damage(f)
    s = Server(hearth_bin, default_model, *LLAMA_ARGS, "--kv-disk", d)
    try:
        text, t = complete(s, P)
        assert text == cold_answers["P"]
        assert t["cached_disk_n"] == 0
        m = metrics(s)
        assert m["hearth_kv_disk_files_rejected_total"] >= 1
        assert m["hearth_kv_disk_disabled"] == 0
        assert m["hearth_kv_disk_hits_total"] == 0
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
    finally:
        rc, _ = s.stop()
    assert rc == 0
    log = s.stderr()
    assert "not loaded: " + message in log, log[-3000:]
    # The first block of P was read, found bad and removed; the blocks after it are not
    # read (a prefix needs its head), except those other reader threads had already
    # started (one thread on a 2-core machine, at most 8); at shutdown good copies took
    # their places.
    removed = [f for f in files if f.name in log]
    assert 1 <= len(removed) <= 8, len(removed)
    for f in removed:
        assert f.exists() and f.stat().st_size == 64 + 16 * 4 + 368640


def test_the_disk_budget_holds_and_answers_stay_right(hearth_bin, default_model, tmp_path, cold_answers):
    budget = 8 * (64 + 64 + 368640)  # eight block files
    s = Server(hearth_bin, default_model, *LLAMA_ARGS, "--kv-disk", tmp_path / "kv", "--kv-disk-bytes", str(budget))
    try:
        assert complete(s, P)[0] == cold_answers["P"]
        assert complete(s, Q)[0] == cold_answers["Q"]
        assert complete(s, P)[0] == cold_answers["P"]
        m = metrics(s)
        assert m["hearth_kv_disk_writes_total"] > 8  # more were written than fit: the oldest went
        assert m["hearth_kv_disk_bytes"] <= budget
        assert m["hearth_kv_disk_blocks"] == len(kv_files(tmp_path / "kv")) <= 8
    finally:
        rc, _ = s.stop()
    assert rc == 0
    assert sum(f.stat().st_size for f in kv_files(tmp_path / "kv")) <= budget


def test_a_folder_made_read_only_mid_run_turns_the_tier_off(hearth_bin, default_model, cold_answers):
    # Root ignores file modes: the server then runs as nobody, so that the folder's mode counts.
    base = pathlib.Path(tempfile.mkdtemp(prefix="hearth_kv_ro_"))
    try:
        os.chmod(base, 0o755)
        d = base / "kv"
        d.mkdir()
        prefix = []
        if os.geteuid() == 0:
            os.chown(d, 65534, 65534)
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        s = _server_as(prefix, hearth_bin, default_model, *LLAMA_ARGS, "--kv-disk", d)
        try:
            assert complete(s, P)[0] == cold_answers["P"]
            folder, = fingerprint_dirs(d)
            os.chmod(folder, 0o555)
            assert complete(s, Q)[0] == cold_answers["Q"]  # evicts P: its writes fail
            assert complete(s, P)[0] == cold_answers["P"]
            m = metrics(s)
            assert m["hearth_kv_disk_disabled"] == 1
            assert m["hearth_kv_disk_writes_total"] == 0
            assert requests.get(s.url + "/health", timeout=10).status_code == 200
        finally:
            rc, _ = s.stop()
        assert rc == 0
        log = s.stderr()
        assert log.count("DISABLED, serving goes on from memory: cannot create ") == 1, log[-3000:]
        assert "Permission denied" in log
        assert kv_files(d) == []
    finally:
        subprocess.run(["chmod", "-R", "u+rwx", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_a_full_disk_turns_the_tier_off(hearth_bin, default_model, tmp_path, cold_answers):
    # A real full disk: a 2 MiB tmpfs (room for five blocks) under a budget far larger.
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2M", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and a tmpfs mount for a real ENOSPC")
    try:
        s = Server(hearth_bin, default_model, *LLAMA_ARGS, "--kv-disk", mnt / "kv", "--kv-disk-bytes", "1G")
        try:
            assert complete(s, P)[0] == cold_answers["P"]
            assert complete(s, Q)[0] == cold_answers["Q"]  # evicts P: the disk fills up
            assert complete(s, P)[0] == cold_answers["P"]
            m = metrics(s)
            assert m["hearth_kv_disk_disabled"] == 1
            assert 0 < m["hearth_kv_disk_writes_total"] <= 5
        finally:
            rc, _ = s.stop()
        assert rc == 0
        log = s.stderr()
        assert log.count("DISABLED, serving goes on from memory: cannot write ") == 1, log[-3000:]
        assert "No space left on device" in log
        assert not list(mnt.rglob("*.tmp"))  # the failed write left nothing behind
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _server_as(prefix, hearth_bin, model, *args):
    """A Server whose process runs under `prefix` (setpriv as another user)."""
    if not prefix:
        return Server(hearth_bin, model, *args)
    wrapper = pathlib.Path(tempfile.mkdtemp(prefix="hearth_wrap_")) / "hearth"
    wrapper.write_text("#!/bin/sh\nexec " + " ".join(prefix) + f" {hearth_bin} \"$@\"\n")
    wrapper.chmod(0o755)
    return Server(wrapper, model, *args)


# --- the hybrid model -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, shared_dir, hearth_bin):
    """A tiny random-weight Qwen3.5 (hybrid) model, as tests/e2e/test_hybrid.py makes it."""
    return tiny_hybrid_gguf(tiny_hybrid_hf(tmp_path_factory.mktemp("qwen35"), shared_dir), hearth_bin)


def test_hybrid_prefix_and_state_from_memory_disk_or_recomputed_give_the_same_tokens(hearth_bin, tiny_gguf,
                                                                                     tmp_path):
    args = ["--threads", "2", "--ctx", "700", "--max-seqs", "1", "--kv-cache-bytes", HYBRID_KV_BYTES]
    cold = Server(hearth_bin, tiny_gguf, *args)
    try:
        want_p, want_q = complete(cold, P)[0], complete(cold, Q)[0]
    finally:
        cold.stop()
    s = Server(hearth_bin, tiny_gguf, *args, "--kv-disk", tmp_path / "kv")
    try:
        first, t = complete(s, P)
        assert t["cached_n"] == 0
        again, t = complete(s, P)
        assert t["cached_n"] > 0 and t["cached_disk_n"] == 0
        assert complete(s, Q)[0] == want_q
        from_disk, t = complete(s, P)
        assert t["cached_disk_n"] > 0, t
        m = metrics(s)
        assert m["hearth_kv_disk_snapshots"] > 0
        assert first == again == from_disk == want_p
    finally:
        rc, _ = s.stop()
    assert rc == 0
