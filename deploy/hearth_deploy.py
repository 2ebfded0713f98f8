#!/usr/bin/env python3
"""Several `hearth serve` replicas behind HAProxy, from one list of replicas.

The list is a JSON file (deploy/replicas.example.json: one replica per GPU of a host;
deploy/replicas.local.json: three CPU replicas on this machine). From it this script writes

  haproxy     the balancer's configuration (deploy/haproxy.cfg.in filled in): affinity by
              conversation over consistent hashing, health from /health/ready, retries on
              another replica, its own /metrics
  systemd     one unit file per replica (hearth-NAME.service), SIGTERM drains it
  compose     a compose-style file (host network) with every replica and the balancer
  prometheus  a scrape configuration: every replica's /metrics and the balancer's
  commands    the shell commands that start every replica and the balancer

and `up` starts them all here in the foreground (replicas first, the balancer once they are
ready); Ctrl-C drains the replicas and stops the balancer. Standard library only.

  python3 deploy/hearth_deploy.py haproxy deploy/replicas.local.json -o /tmp/haproxy.cfg
  python3 deploy/hearth_deploy.py up deploy/replicas.local.json
"""
import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "haproxy.cfg.in"

DEFAULTS = {"hearth": "hearth", "serve_args": [], "max_seqs": 8, "max_queue": 64, "drain_seconds": 30}
BALANCER_DEFAULTS = {
    "bind": "127.0.0.1:8080",    # where clients connect
    "stats_bind": "127.0.0.1:8404",  # the balancer's /metrics (Prometheus) and /stats page
    "stats_socket": "",          # HAProxy's admin socket (empty: none)
    "affinity": True,            # false: round robin (no affinity), for comparison
    "spill_at": 0,               # requests on a replica from which its new ones go elsewhere (0: 2 x max_seqs)
    "prompt_bytes": 4096,        # bytes of each prompt field hashed when no key is sent
    "bufsize": 262144,           # tune.bufsize: largest request hashed whole and retried
    "timeout_s": 600,            # longest request (client and server side)
    "maxconn_per_replica": 0,    # 0: --max-seqs + --max-queue (what a replica admits without 429)
    "maxconn": 4096,             # connections the balancer takes in all
    "log_level": "info",         # "info": one line per request on stdout; "notice": none
}
REPLICA_DEFAULTS = {"host": "127.0.0.1", "device": "auto", "args": []}


class ListError(ValueError):
    """A list of replicas that cannot be used; the message names the field."""


def _check_host_port(value, where):
    host, sep, port = str(value).rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ListError(f"{where}: '{value}' is not HOST:PORT")


def load_list(source):
    """The list (a path, or the parsed object) with defaults filled in; raises ListError."""
    where = str(source) if not isinstance(source, dict) else "the list"
    if isinstance(source, dict):
        raw = source
    else:
        try:
            raw = json.loads(Path(source).read_text())
        except OSError as e:
            raise ListError(f"cannot read {source}: {e.strerror}") from e
        except json.JSONDecodeError as e:
            raise ListError(f"{source}: not JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    if not isinstance(raw, dict):
        raise ListError(f"{where}: the top level must be an object")
    known = set(DEFAULTS) | {"model", "balancer", "replicas"}
    for k in raw:
        if k not in known and not k.startswith("_"):
            raise ListError(f"{where}: unknown field '{k}' (known: {', '.join(sorted(known))})")
    cfg = {**DEFAULTS, **raw}
    if not isinstance(cfg.get("model"), str) or not cfg["model"]:
        raise ListError(f"{where}: 'model' (the model every replica serves) is required")
    if not isinstance(cfg["serve_args"], list) or not all(isinstance(a, str) for a in cfg["serve_args"]):
        raise ListError(f"{where}: 'serve_args' must be a list of strings")
    for k in ("max_seqs", "max_queue"):
        if not isinstance(cfg[k], int) or cfg[k] < 1:
            raise ListError(f"{where}: '{k}' must be a positive integer, got {cfg[k]!r}")
    if not isinstance(cfg["drain_seconds"], (int, float)) or cfg["drain_seconds"] < 0:
        raise ListError(f"{where}: 'drain_seconds' must be a number >= 0")
    bal = raw.get("balancer", {})
    if not isinstance(bal, dict):
        raise ListError(f"{where}: 'balancer' must be an object")
    for k in bal:
        if k not in BALANCER_DEFAULTS and not k.startswith("_"):
            raise ListError(f"{where}: unknown field 'balancer.{k}' (known: {', '.join(BALANCER_DEFAULTS)})")
    cfg["balancer"] = {**BALANCER_DEFAULTS, **bal}
    b = cfg["balancer"]
    _check_host_port(b["bind"], f"{where}: balancer.bind")
    _check_host_port(b["stats_bind"], f"{where}: balancer.stats_bind")
    admits = cfg["max_seqs"] + cfg["max_queue"]
    if not b["maxconn_per_replica"]:
        b["maxconn_per_replica"] = admits
    if not isinstance(b["maxconn_per_replica"], int) or not 0 < b["maxconn_per_replica"] <= admits:
        raise ListError(f"{where}: balancer.maxconn_per_replica must be in [1, max_seqs + max_queue = {admits}] "
                        f"(above it a replica answers 429, which HAProxy 2.6 cannot retry elsewhere)")
    if not b["spill_at"]:
        b["spill_at"] = min(2 * cfg["max_seqs"], b["maxconn_per_replica"])
    if not isinstance(b["spill_at"], int) or not 0 < b["spill_at"] <= b["maxconn_per_replica"]:
        raise ListError(f"{where}: balancer.spill_at must be in [1, maxconn_per_replica = {b['maxconn_per_replica']}]")
    reps = raw.get("replicas")
    if not isinstance(reps, list) or not reps:
        raise ListError(f"{where}: 'replicas' must be a non-empty list")
    cfg["replicas"] = []
    names, addrs = set(), set()
    for i, r in enumerate(reps):
        at = f"{where}: replicas[{i}]"
        if not isinstance(r, dict):
            raise ListError(f"{at} must be an object")
        for k in r:
            if k not in REPLICA_DEFAULTS and k not in ("name", "port") and not k.startswith("_"):
                raise ListError(f"{at}: unknown field '{k}'")
        r = {**REPLICA_DEFAULTS, **r}
        name = r.get("name")
        if not isinstance(name, str) or not name or not all(c.isalnum() or c in "-_" for c in name):
            raise ListError(f"{at}: 'name' must be letters, digits, '-' or '_', got {name!r}")
        if name in names:
            raise ListError(f"{at}: the name '{name}' is used twice")
        if not isinstance(r.get("port"), int) or not 0 < r["port"] < 65536:
            raise ListError(f"{at} ({name}): 'port' must be an integer in [1, 65535], got {r.get('port')!r}")
        if (r["host"], r["port"]) in addrs:
            raise ListError(f"{at} ({name}): {r['host']}:{r['port']} is used twice")
        names.add(name)
        addrs.add((r["host"], r["port"]))
        cfg["replicas"].append(r)
    cfg["_source"] = where
    return cfg


def replica_command(cfg, r):
    """The argv that starts replica `r`."""
    return [cfg["hearth"], "serve", "-m", cfg["model"], "--host", r["host"], "--port", str(r["port"]),
            "--device", r["device"], "--max-seqs", str(cfg["max_seqs"]), "--max-queue", str(cfg["max_queue"]),
            "--drain-seconds", f"{cfg['drain_seconds']:g}", *cfg["serve_args"], *r["args"]]


def affinity_rules(cfg):
    """The backend's routing by affinity key: rendezvous hashing written out as HAProxy
    rules, one group per replica (HAProxy's own consistent hash cannot leave a busy replica
    for the least loaded one: its only load bound, hash-balance-factor, is relative to the
    average load, and moves the second of two conversations of an idle replica)."""
    be = "hearth_replicas"
    out = ["  # No key, or the key's replica is busy or down: the least loaded replica.",
           "  balance leastconn",
           "  # The key's 64-bit hash, then one 32-bit hash of (replica, key) per replica that is up;",
           "  # the highest wins (txn.best).",
           "  http-request set-var(txn.kh) var(txn.key),xxh64 if { var(txn.key) -m found }"]
    for r in cfg["replicas"]:
        n = r["name"]
        out.append(f"  http-request set-var(txn.h_{n}) str({n}:),concat(,txn.kh,),xxh32 "
                   f"if {{ var(txn.kh) -m found }} {{ srv_is_up({be}/{n}) }}")
    for r in cfg["replicas"]:
        n = r["name"]
        out += [f"  http-request set-var(txn.win) bool(1) if {{ var(txn.h_{n}) -m found }} !{{ var(txn.bh) -m found }}",
                f"  http-request set-var(txn.win) bool(1) if {{ var(txn.h_{n}),sub(txn.bh) gt 0 }}",
                f"  http-request set-var(txn.best) str({n}) if {{ var(txn.win) -m bool }}",
                f"  http-request set-var(txn.bh) var(txn.h_{n}) if {{ var(txn.win) -m bool }}",
                "  http-request unset-var(txn.win)"]
    spill = cfg["balancer"]["spill_at"]
    out.append(f"  # Spill: the key's replica with {spill} requests on it already (balancer.spill_at) is skipped.")
    for r in cfg["replicas"]:
        n = r["name"]
        out.append(f"  use-server {n} if {{ var(txn.best) -m str {n} }} {{ srv_conn({be}/{n}) lt {spill} }}")
    return out


def render_haproxy(cfg, affinity=None):
    """The HAProxy configuration; `affinity` overrides balancer.affinity."""
    b = cfg["balancer"]
    on = b["affinity"] if affinity is None else affinity
    if on:
        balance = "\n".join(affinity_rules(cfg))
    else:
        balance = "  balance roundrobin"
    servers = "\n".join(f"  server {r['name']} {r['host']}:{r['port']}" for r in cfg["replicas"])
    values = {
        "SOURCE": cfg.get("_source", "the list"), "LOG_LEVEL": b["log_level"], "MAXCONN_TOTAL": b["maxconn"],
        "BUFSIZE": b["bufsize"], "TIMEOUT_S": b["timeout_s"], "STATS_BIND": b["stats_bind"], "BIND": b["bind"],
        "PROMPT_BYTES": b["prompt_bytes"], "BALANCE": balance, "MAXCONN": b["maxconn_per_replica"],
        "SERVERS": servers, "SPILL_AT": b["spill_at"],
    }
    text = TEMPLATE.read_text()
    sock = b["stats_socket"]
    if sock:
        text = text.replace("@STATS_SOCKET@", sock)
    else:
        text = "".join(line for line in text.splitlines(keepends=True) if "@STATS_SOCKET@" not in line)
    for k, v in values.items():
        text = text.replace(f"@{k}@", str(v))
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise ListError(f"the template {TEMPLATE} has placeholders this script does not fill: {', '.join(left)}")
    return text


def render_systemd(cfg):
    """{file name: text}: one unit per replica; systemd's SIGTERM drains it."""
    units = {}
    for r in cfg["replicas"]:
        cmd = " ".join(shlex.quote(a) for a in replica_command(cfg, r))
        units[f"hearth-{r['name']}.service"] = f"""# Generated by deploy/hearth_deploy.py from {cfg.get('_source', 'the list')}.
[Unit]
Description=Hearth replica {r['name']} ({r['device']}, port {r['port']})
After=network-online.target
Wants=network-online.target
PartOf=hearth.target

[Service]
ExecStart={cmd}
# SIGTERM drains: new requests get 503 (the balancer retries them elsewhere) and
# /health/ready 503 (it stops routing here) while requests in flight finish, for at most
# --drain-seconds; systemd waits that long plus a margin before SIGKILL.
KillSignal=SIGTERM
TimeoutStopSec={int(cfg['drain_seconds']) + 15}
Restart=on-failure
RestartSec=2

[Install]
WantedBy=hearth.target
"""
    wants = " ".join(f"hearth-{r['name']}.service" for r in cfg["replicas"])
    units["hearth.target"] = f"""[Unit]
Description=Hearth replicas (start or stop them all: systemctl start hearth.target)
Wants={wants}

[Install]
WantedBy=multi-user.target
"""
    return units


def render_compose(cfg):
    """A compose-style file: every replica and the balancer on the host network (so the
    generated haproxy.cfg holds as it is). HEARTH_IMAGE: an image with hearth in it."""
    lines = [f"# Generated by deploy/hearth_deploy.py from {cfg.get('_source', 'the list')}.",
             "# haproxy.cfg beside this file: python3 deploy/hearth_deploy.py haproxy LIST -o haproxy.cfg",
             "services:"]
    for r in cfg["replicas"]:
        cmd = json.dumps(replica_command(cfg, r)[1:])
        lines += [f"  hearth-{r['name']}:",
                  "    image: ${HEARTH_IMAGE:-hearth:latest}",
                  "    network_mode: host",
                  f"    entrypoint: [{json.dumps(cfg['hearth'])}]",
                  f"    command: {cmd}",
                  "    volumes: [\"" + str(Path(cfg["model"]).parent) + ":" + str(Path(cfg["model"]).parent) + ":ro\"]",
                  "    stop_signal: SIGTERM",
                  f"    stop_grace_period: {int(cfg['drain_seconds']) + 15}s",
                  "    restart: on-failure"]
        if r["device"].startswith("cuda:"):
            lines += ["    deploy:", "      resources:", "        reservations:", "          devices:",
                      f"            - {{driver: nvidia, device_ids: [\"{r['device'].split(':', 1)[1]}\"], "
                      "capabilities: [gpu]}"]
        lines += ["    healthcheck:",
                  f"      test: [\"CMD\", \"curl\", \"-fsS\", \"http://{r['host']}:{r['port']}/health\"]",
                  "      interval: 5s"]
    lines += ["  balancer:", "    image: haproxy:2.6", "    network_mode: host",
              "    volumes: [\"./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro\"]",
              "    depends_on: [" + ", ".join(f"hearth-{r['name']}" for r in cfg["replicas"]) + "]"]
    return "\n".join(lines) + "\n"


def render_prometheus(cfg):
    """A Prometheus scrape configuration: each replica's /metrics, and the balancer's."""
    reps = ", ".join(f"'{r['host']}:{r['port']}'" for r in cfg["replicas"])
    return f"""# Generated by deploy/hearth_deploy.py from {cfg.get('_source', 'the list')}.
# With --api-key on the replicas, add `authorization: {{credentials: KEY}}` to the first job.
scrape_configs:
  - job_name: hearth
    static_configs:
      - targets: [{reps}]
  - job_name: hearth-balancer
    static_configs:
      - targets: ['{cfg['balancer']['stats_bind']}']
"""


def render_commands(cfg, haproxy_cfg="haproxy.cfg"):
    out = ["# Every replica (one per GPU or host), then the balancer once they answer /health/ready:"]
    for r in cfg["replicas"]:
        out.append(" ".join(shlex.quote(a) for a in replica_command(cfg, r)) + " &")
    out.append(f"haproxy -f {shlex.quote(haproxy_cfg)} -db &")
    return "\n".join(out) + "\n"


def ready(host, port, timeout=2.0):
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/health/ready", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


def up(cfg, run_dir, affinity=None, start_timeout=300):
    """Starts every replica and the balancer here; returns when they stop (Ctrl-C or SIGTERM:
    the replicas drain, then the balancer stops)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    procs = {}
    for r in cfg["replicas"]:
        log = open(run_dir / f"{r['name']}.log", "ab")
        procs[r["name"]] = subprocess.Popen(replica_command(cfg, r), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL)
        print(f"hearth_deploy: replica {r['name']} on {r['host']}:{r['port']} ({r['device']}), "
              f"log {run_dir / (r['name'] + '.log')}", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    deadline = time.monotonic() + start_timeout
    waiting = {r["name"]: r for r in cfg["replicas"]}
    while waiting and not stop:
        for name, r in list(waiting.items()):
            if procs[name].poll() is not None:
                print(f"hearth_deploy: replica {name} exited with {procs[name].returncode} while starting; "
                      f"see its log", file=sys.stderr, flush=True)
                waiting.pop(name)
            elif ready(r["host"], r["port"]):
                print(f"hearth_deploy: replica {name} ready", flush=True)
                waiting.pop(name)
        if time.monotonic() > deadline:
            print(f"hearth_deploy: not ready after {start_timeout} s: {', '.join(waiting)}", file=sys.stderr)
            break
        time.sleep(0.2)
    cfg_path = run_dir / "haproxy.cfg"
    cfg_path.write_text(render_haproxy(cfg, affinity))
    balancer = None
    if not stop:
        balancer = subprocess.Popen(["haproxy", "-f", str(cfg_path), "-db"], stdin=subprocess.DEVNULL,
                                    stdout=open(run_dir / "haproxy.log", "ab"), stderr=subprocess.STDOUT)
        b = cfg["balancer"]
        print(f"hearth_deploy: balancer on http://{b['bind']} (OpenAI API at /v1), its metrics at "
              f"http://{b['stats_bind']}/metrics, stats at /stats; Ctrl-C drains and stops", flush=True)
    while not stop and (balancer is None or balancer.poll() is None):
        time.sleep(0.2)
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)  # drain
    for p in procs.values():
        try:
            p.wait(timeout=cfg["drain_seconds"] + 15)
        except subprocess.TimeoutExpired:
            p.kill()
    if balancer is not None and balancer.poll() is None:
        balancer.send_signal(signal.SIGUSR1)  # soft stop: finish what it carries
        try:
            balancer.wait(timeout=10)
        except subprocess.TimeoutExpired:
            balancer.kill()
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["haproxy", "systemd", "compose", "prometheus", "commands", "up"])
    ap.add_argument("list", help="the list of replicas (JSON; see deploy/replicas.example.json)")
    ap.add_argument("-o", "--out", help="output file (a folder for systemd; for up: the run folder)")
    aff = ap.add_mutually_exclusive_group()
    aff.add_argument("--affinity", dest="affinity", action="store_true", default=None,
                     help="hash by conversation (overrides balancer.affinity)")
    aff.add_argument("--no-affinity", dest="affinity", action="store_false", help="round robin")
    a = ap.parse_args(argv)
    try:
        cfg = load_list(a.list)
        if a.what == "up":
            return up(cfg, a.out or "hearth-run", a.affinity)
        if a.what == "systemd":
            units = render_systemd(cfg)
            out = Path(a.out or ".")
            out.mkdir(parents=True, exist_ok=True)
            for name, text in units.items():
                (out / name).write_text(text)
                print(out / name)
            return 0
        text = {"haproxy": lambda: render_haproxy(cfg, a.affinity), "compose": lambda: render_compose(cfg),
                "prometheus": lambda: render_prometheus(cfg), "commands": lambda: render_commands(cfg)}[a.what]()
    except ListError as e:
        print(f"hearth_deploy: {e}", file=sys.stderr)
        return 2
    if a.out:
        Path(a.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
