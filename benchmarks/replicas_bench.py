#!/usr/bin/env python3
"""Aggregate throughput and time to first token of the agent-shaped workload
(benchmarks/agent_workload.py: N conversations x T turns, growing prompts) through HAProxy
(deploy/) in front of 1 or 3 `hearth serve` replicas, with conversation affinity on or off
(round robin). Every configuration starts fresh replicas (cold caches) and the balancer from
the configuration deploy/hearth_deploy.py writes.

  /work/main/.venv/bin/python benchmarks/replicas_bench.py --hearth build/hearth \\
      --model models/default.gguf --threads-total 2 --out /tmp/replicas.json

Prints one table row per configuration (markdown) and writes every turn's numbers to --out.
"""
import argparse
import importlib.util
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import agent_workload as aw  # noqa: E402

_spec = importlib.util.spec_from_file_location("hearth_deploy", HERE.parent / "deploy" / "hearth_deploy.py")
deploy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deploy)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: exited with {proc.returncode}")
        try:
            if requests.get(url + "/health/ready", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url}: not ready in {timeout} s")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")


def run_config(a, n_replicas, affinity, workdir):
    threads = max(1, a.threads_total // n_replicas)
    serve_args = ["--threads", str(threads), "--ctx", "4096", "--kv-cache-bytes", a.kv_cache_bytes, "--no-ui",
                  *a.serve_arg]
    cfg = deploy.load_list({
        "hearth": a.hearth, "model": a.model, "max_seqs": a.max_seqs, "max_queue": 64, "drain_seconds": 5,
        "serve_args": serve_args,
        "balancer": {"bind": f"127.0.0.1:{free_port()}", "stats_bind": f"127.0.0.1:{free_port()}",
                     "log_level": "notice"},
        "replicas": [{"name": f"r{i}", "port": free_port(), "device": a.device} for i in range(n_replicas)]})
    procs = []
    logs = []
    try:
        for r in cfg["replicas"]:
            log = open(workdir / f"{r['name']}-{n_replicas}-{int(affinity)}.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen(deploy.replica_command(cfg, r), stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL))
        for r, p in zip(cfg["replicas"], procs):
            wait_ready(f"http://{r['host']}:{r['port']}", p)
        path = workdir / f"haproxy-{n_replicas}-{int(affinity)}.cfg"
        path.write_text(deploy.render_haproxy(cfg, affinity))
        bal = subprocess.Popen([shutil.which("haproxy") or "/usr/sbin/haproxy", "-f", str(path), "-db"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(bal)
        url = f"http://{cfg['balancer']['bind']}"
        deadline = time.monotonic() + 15
        while True:  # the balancer's health checks find every replica up
            try:
                csv = requests.get(f"http://{cfg['balancer']['stats_bind']}/stats;csv", timeout=2).text
                if sum(",UP," in line for line in csv.splitlines() if line.startswith("hearth_replicas,r")) == n_replicas:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the balancer never saw every replica up")
            time.sleep(0.1)
        convs, wall = aw.run_workload(url + "/v1", a.conversations, a.turns, a.max_tokens,
                                      tag=f"bench-{n_replicas}-{int(affinity)}-{time.time_ns()}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    turns = [t for c in convs for t in c.turns]
    ok = [t for t in turns if not t.error]
    later = [t for t in ok if t.turn > 0]
    reuse = [x for c in convs for x in aw.reuses_previous(c.turns)]
    return {
        "replicas": n_replicas, "affinity": affinity, "threads_per_replica": threads, "wall_s": wall,
        "turns": len(turns), "errors": len(turns) - len(ok),
        "completion_tok_s": sum(t.completion_tokens for t in ok) / wall,
        "prompt_tok_s": sum(t.prompt_tokens for t in ok) / wall,
        "computed_prompt_tok_s": sum(t.prompt_tokens - t.cached_tokens for t in ok) / wall,
        "cached_fraction": sum(t.cached_tokens for t in ok) / max(1, sum(t.prompt_tokens for t in ok)),
        "reuse_previous": sum(reuse) / max(1, len(reuse)),
        "ttft_p50_s": statistics.median(t.ttft_s for t in ok), "ttft_p90_s": pct([t.ttft_s for t in ok], 0.9),
        "ttft_later_p50_s": statistics.median(t.ttft_s for t in later) if later else float("nan"),
        "per_turn": [t.__dict__ for t in turns],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hearth", default="build/hearth")
    ap.add_argument("--model", default="models/default.gguf")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads-total", type=int, default=2, help="compute threads shared out among the replicas")
    ap.add_argument("--kv-cache-bytes", default="256M")
    ap.add_argument("--max-seqs", type=int, default=8)
    ap.add_argument("--conversations", type=int, default=16)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--serve-arg", action="append", default=[], help="one more `hearth serve` argument (repeatable)")
    ap.add_argument("--configs", default="1:on,3:on,3:off", help="REPLICAS:on|off,... (affinity)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", help="JSON file for every run's numbers")
    a = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as d:
        for _ in range(a.repeat):
            for spec in a.configs.split(","):
                n, aff = spec.split(":")
                res = run_config(a, int(n), aff == "on", Path(d))
                results.append(res)
                print(f"| {res['replicas']} | {'on' if res['affinity'] else 'off (round robin)'} | "
                      f"{res['threads_per_replica']} | {res['wall_s']:.1f} | {res['completion_tok_s']:.1f} | "
                      f"{res['prompt_tok_s']:.0f} | {res['computed_prompt_tok_s']:.0f} | "
                      f"{res['cached_fraction']:.2f} | {res['reuse_previous']:.2f} | {res['ttft_p50_s']:.2f} | "
                      f"{res['ttft_p90_s']:.2f} | {res['ttft_later_p50_s']:.2f} | {res['errors']} |", flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
