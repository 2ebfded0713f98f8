"""Time to first token of a long agent-shaped prompt after a restart with the KV disk tier
(`hearth serve --kv-disk DIR`) against a cold prefill of the same prompt.

Each run: a fresh DIR; server 1 answers the prompt with max_tokens 1 (a cold prefill: its
ttft), stops (its prefix blocks go to DIR at shutdown); server 2 starts on the same DIR and
answers the same prompt (its ttft: the blocks read back from disk, then the prompt's last
token computed). Prints each run and the medians. The files server 2 reads were just written,
so they are likely still in the page cache (say so when quoting the numbers); with
--drop-cache a third server starts after the files were synced and dropped from the page cache
(posix_fadvise DONTNEED), so that its reads come from the device.

  python benchmarks/kv_disk_ttft.py --hearth build/hearth --model models/default.gguf --tokens 16000
  (on a GPU: --server-args "--device cuda"; standard library only, so it runs where requests is absent)
"""
import argparse
import os
import pathlib
import shutil
import statistics
import sys
import time
import json
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "e2e"))
from serve_util import Server  # noqa: E402


def agent_prompt(n_words):
    tools = []
    i = 0
    while sum(len(t.split()) for t in tools) < n_words:
        tools.append(f"Tool {i}: read_section_{i}(path: string, start: int, end: int) returns the lines of "
                     f"section {i} of the file at path, with their numbers; use it before editing module {i}.")
        i += 1
    return "You are a coding agent. The tools you can call:\n" + "\n".join(tools) + "\nTask: fix the failing test."


def ttft(server, prompt):
    t0 = time.monotonic()
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(server.url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        j = json.loads(r.read())
    wall = time.monotonic() - t0
    return j["timings"], j["usage"]["prompt_tokens"], wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hearth", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=16000, help="prompt length to aim for")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/hearth_kv_disk_bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--server-args", default="", help="more options for both servers, e.g. '--device cuda'")
    ap.add_argument("--drop-cache", action="store_true", help="also time a restart with the files out of the page cache")
    a = ap.parse_args()
    prompt = agent_prompt(int(a.tokens * 0.51))
    args = ["--threads", str(a.threads), "--ctx", str(a.tokens * 5 // 4 + 1024), "--max-seqs", "1",
            "--kv-cache-bytes", "2G", "--kv-disk", a.dir, "--kv-disk-bytes", "4G"] + a.server_args.split()
    cold, disk, cold_cache = [], [], []
    for run in range(a.runs):
        shutil.rmtree(a.dir, ignore_errors=True)
        s = Server(a.hearth, a.model, *args, start_timeout=300)
        try:
            t1, n, w1 = ttft(s, prompt)
        finally:
            t_stop = time.monotonic()
            s.stop(timeout=300)
            stop_s = time.monotonic() - t_stop
        s = Server(a.hearth, a.model, *args, start_timeout=300)
        try:
            t2, _, w2 = ttft(s, prompt)
        finally:
            s.stop(timeout=300)
        # The server's own split of the disk hit (read by the tier's threads, copy into the pool).
        # (with --server-args "--tune engine.timing=each": its steps and its time to the first token too)
        hit_log = [ln for ln in s.stderr().splitlines()
                   if ("kv-disk:" in ln and " read in " in ln) or "hearth: step of" in ln or "first token" in ln]
        size = sum(f.stat().st_size for f in pathlib.Path(a.dir).rglob("*.kv"))
        dropped = ""
        if a.drop_cache:
            os.sync()
            for f in pathlib.Path(a.dir).rglob("*.kv"):
                fd = os.open(f, os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
            s = Server(a.hearth, a.model, *args, start_timeout=300)
            try:
                t3, _, w3 = ttft(s, prompt)
            finally:
                s.stop(timeout=300)
            cold_cache.append(t3["ttft_ms"])
            dropped = f"; page cache dropped: ttft {t3['ttft_ms']:.0f} ms ({t3['cached_disk_n']} tokens from disk)"
        print(f"run {run}: {n} prompt tokens; cold ttft {t1['ttft_ms']:.0f} ms (wall {w1:.2f} s); after restart "
              f"ttft {t2['ttft_ms']:.0f} ms (wall {w2:.2f} s), {t2['cached_disk_n']} tokens from disk "
              f"({size / 2**20:.0f} MiB of files); first server's stop {stop_s:.2f} s{dropped}", flush=True)
        for ln in hit_log:
            print("  server:", ln.strip(), flush=True)
        cold.append(t1["ttft_ms"])
        disk.append(t2["ttft_ms"])
    mc, md = statistics.median(cold), statistics.median(disk)
    print(f"median of {a.runs}: cold {mc:.0f} ms, disk hit after restart {md:.0f} ms: {mc / md:.1f}x sooner")
    if cold_cache:
        print(f"median with the page cache dropped: {statistics.median(cold_cache):.0f} ms")
    shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
