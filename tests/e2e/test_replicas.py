"""Several `hearth serve` replicas behind HAProxy (deploy/): three replicas of the default model
on localhost, the real haproxy with the configuration deploy/hearth_deploy.py writes from a
list of them, and an agent-shaped workload (benchmarks/agent_workload.py) through it.

- affinity: every turn of a conversation lands on one replica and reuses the previous turn's
  prompt from its prefix cache; with round robin most turns do not;
- the key: X-Session-Id, Anthropic's metadata.user_id, else the prompt's first fields;
- a drained replica (SIGTERM under --drain-seconds) finishes its stream, answers 503 and
  /health/ready 503, and the balancer sends its conversations elsewhere; a deadline ends it;
- a killed replica loses only its requests in flight (they fail, nothing hangs); the others
  go on and the balancer stops routing to it.

Skipped when haproxy is not installed (scripts/test.sh installs it: HEARTH_TEST_APT_PACKAGES).
"""
import importlib.util
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

import anthropic
import openai
import pytest
import requests

from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import agent_workload as aw  # noqa: E402


def _load_deploy():
    spec = importlib.util.spec_from_file_location("hearth_deploy", ROOT / "deploy" / "hearth_deploy.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


deploy = _load_deploy()
HAPROXY = shutil.which("haproxy") or (shutil.which("haproxy", path="/usr/sbin:/sbin"))
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (scripts/test.sh installs it with "
                                "the test packages; by hand: apt-get install haproxy)")

DRAIN_S = 30
REPLICA_ARGS = ["--threads", "1", "--ctx", "4096", "--kv-cache-bytes", "192M", "--no-ui"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One `hearth serve` on a fixed port (the balancer's list names it)."""

    def __init__(self, hearth_bin, model, name, port, drain_s=DRAIN_S):
        self.name, self.port = name, port
        self.url = f"http://127.0.0.1:{port}"
        self.argv = [str(hearth_bin), "serve", "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
                     "--max-seqs", "8", "--max-queue", "64", "--drain-seconds", str(drain_s), *REPLICA_ARGS]
        self.proc = None
        self.start()

    def start(self, timeout=90):
        self.log = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"replica {self.name} exited with {self.proc.returncode}: {self.output()[-2000:]}")
            try:
                if requests.get(self.url + "/health/ready", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"replica {self.name} was not ready in {timeout} s: {self.output()[-2000:]}")

    def output(self):
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")

    def alive(self):
        return self.proc.poll() is None

    def ready(self):
        try:
            return requests.get(self.url + "/health/ready", timeout=5).status_code == 200
        except requests.RequestException:
            return False

    def stop(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)


class Balancer:
    """The real haproxy, with the configuration deploy/hearth_deploy.py renders."""

    def __init__(self, cfg, workdir):
        self.cfg, self.workdir, self.proc = cfg, workdir, None
        self.url = f"http://{cfg['balancer']['bind']}"
        self.stats_url = f"http://{cfg['balancer']['stats_bind']}"

    def start(self, affinity=True):
        self.stop()
        path = self.workdir / ("haproxy-affinity.cfg" if affinity else "haproxy-rr.cfg")
        path.write_text(deploy.render_haproxy(self.cfg, affinity))
        check = subprocess.run([HAPROXY, "-c", "-q", "-f", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, f"haproxy rejects the generated configuration:\n{check.stderr}"
        self.log = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen([HAPROXY, "-f", str(path), "-db"], stdout=self.log, stderr=self.log,
                                     stdin=subprocess.DEVNULL)
        self.wait_status({r["name"]: "UP" for r in self.cfg["replicas"]}, timeout=15)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def status(self):
        """{replica name: HAProxy's status (UP, DOWN, "UP 1/2", ...)} from the stats CSV."""
        rows = requests.get(self.stats_url + "/stats;csv", timeout=5).text.lstrip("# ").splitlines()
        head = rows[0].split(",")
        out = {}
        for line in rows[1:]:
            f = dict(zip(head, line.split(",")))
            if f.get("pxname") == "hearth_replicas" and f.get("svname") not in ("BACKEND", "FRONTEND"):
                out[f["svname"]] = f["status"]
        return out

    def wait_status(self, want, timeout):
        deadline = time.monotonic() + timeout
        while True:
            try:
                st = self.status()
                if all(st.get(k) == v for k, v in want.items()):
                    return st
            except requests.RequestException:
                st = None
            if time.monotonic() > deadline:
                raise AssertionError(f"balancer status {st}, wanted {want}")
            time.sleep(0.1)


def replica_list(hearth_bin, model, replicas):
    """The list deploy/hearth_deploy.py reads, for these running replicas (and a free port for
    the balancer and its stats)."""
    return deploy.load_list({
        "hearth": str(hearth_bin), "model": str(model), "max_seqs": 8, "max_queue": 64,
        "drain_seconds": DRAIN_S, "serve_args": REPLICA_ARGS,
        "balancer": {"bind": f"127.0.0.1:{free_port()}", "stats_bind": f"127.0.0.1:{free_port()}",
                     "log_level": "notice"},
        "replicas": [{"name": r.name, "port": r.port, "device": "cpu"} for r in replicas]})


class Cluster:
    def __init__(self, hearth_bin, model, workdir):
        self.hearth_bin, self.model = hearth_bin, model
        self.replicas = [Replica(hearth_bin, model, f"r{i}", free_port()) for i in range(3)]
        self.cfg = replica_list(hearth_bin, model, self.replicas)
        self.balancer = Balancer(self.cfg, workdir)
        self.balancer.start(affinity=True)
        self.url = self.balancer.url

    def replica(self, name):
        return next(r for r in self.replicas if r.name == name)

    def restore(self):
        """Every replica running and UP behind the balancer (after a test killed or drained one)."""
        for r in self.replicas:
            if r.alive() and not r.ready():
                r.proc.wait(timeout=DRAIN_S + 5)  # draining (a test failed before it ended): let it end
            if not r.alive():
                r.start()
        self.balancer.wait_status({r.name: "UP" for r in self.replicas}, timeout=15)

    def close(self):
        self.balancer.stop()
        for r in self.replicas:
            r.stop()


@pytest.fixture(scope="module")
def cluster(hearth_bin, default_model, tmp_path_factory):
    c = Cluster(hearth_bin, default_model, tmp_path_factory.mktemp("replicas"))
    yield c
    c.close()


def chat(url, content, session=None, max_tokens=1, timeout=60):
    headers = {"X-Session-Id": session} if session else {}
    return requests.post(url + "/v1/chat/completions", headers=headers, timeout=timeout,
                         json={"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                               "temperature": 0})


def session_on(cluster, name, avoid=()):
    """A session id the balancer sends to replica `name`."""
    for i in range(200):
        sid = f"probe-{i}"
        if sid in avoid:
            continue
        r = chat(cluster.url, "hi", sid)
        assert r.status_code == 200, r.text
        if r.headers["X-Hearth-Replica"] == name:
            return sid
    raise AssertionError(f"no session id of 200 lands on {name}")


def summary(convs):
    turns = [t for c in convs for t in c.turns]
    return [(t.conv, t.turn, t.replica, t.prompt_tokens, t.cached_tokens, t.error[:80]) for t in turns]


def test_affinity_every_turn_hits_its_replicas_prefix_cache(cluster):
    convs, _ = aw.run_workload(cluster.url + "/v1", conversations=16, turns=6, max_tokens=4, tag="affinity")
    for c in convs:
        assert [t.error for t in c.turns if t.error] == [], summary([c])
        assert len(c.turns) == 6
        assert len({t.replica for t in c.turns}) == 1, f"conversation {c.conv} moved: {summary([c])}"
        assert all(t.cached_tokens > 0 for t in c.turns[1:]), summary([c])
        assert all(aw.reuses_previous(c.turns)), f"a turn did not reuse the previous one: {summary([c])}"
    spread = Counter(c.turns[0].replica for c in convs)
    assert len(spread) == 3, f"16 conversations over {dict(spread)}"
    # Each replica's own /metrics counts its prefix hits.
    for r in cluster.replicas:
        text = requests.get(r.url + "/metrics", timeout=10).text
        hits = [float(line.split()[-1]) for line in text.splitlines() if line.startswith("hearth_prefix_cache_hits_total")]
        assert hits and hits[0] > 0, r.name
    # And the balancer's: requests per replica in Prometheus form.
    text = requests.get(cluster.balancer.stats_url + "/metrics", timeout=10).text
    for r in cluster.replicas:
        assert f'haproxy_server_http_responses_total{{proxy="hearth_replicas",server="{r.name}",code="2xx"}}' in text


def test_round_robin_mostly_misses_the_cache(cluster):
    cluster.balancer.start(affinity=False)
    try:
        convs, _ = aw.run_workload(cluster.url + "/v1", conversations=8, turns=4, max_tokens=4, tag="roundrobin")
    finally:
        cluster.balancer.start(affinity=True)
    assert not [t for c in convs for t in c.turns if t.error], summary(convs)
    reuse = [ok for c in convs for ok in aw.reuses_previous(c.turns)]
    moved = sum(len({t.replica for t in c.turns}) > 1 for c in convs)
    assert moved >= 7, f"only {moved} of 8 conversations moved between replicas: {summary(convs)}"
    assert sum(reuse) < len(reuse) / 2, f"{sum(reuse)} of {len(reuse)} turns reused the previous prompt"


def test_session_header_and_anthropic_user_id_pick_the_replica(cluster):
    seen = Counter()
    for i in range(9):
        a = chat(cluster.url, f"first question {i}", session=f"sess-{i}")
        b = chat(cluster.url, f"an unrelated second question {i * 7}", session=f"sess-{i}")
        assert a.status_code == b.status_code == 200, (a.text, b.text)
        assert a.headers["X-Hearth-Replica"] == b.headers["X-Hearth-Replica"]
        assert a.headers["X-Hearth-Affinity"].startswith("session ")
        seen[a.headers["X-Hearth-Replica"]] += 1
    assert len(seen) >= 2, f"9 sessions all on {dict(seen)}"
    client = anthropic.Anthropic(base_url=cluster.url, api_key="none", max_retries=0)
    for user in ("user-a", "user-b", "user-c"):
        names = set()
        for text in ("hello", "something else entirely"):
            raw = client.messages.with_raw_response.create(
                model="default", max_tokens=1, metadata={"user_id": user},
                messages=[{"role": "user", "content": text}])
            assert raw.headers["x-hearth-affinity"].startswith("client ")
            names.add(raw.headers["x-hearth-replica"])
        assert len(names) == 1, (user, names)
    # Without a key, a chat's system prompt and first user message are the key: the same first
    # turn lands together whatever follows; another first message may land elsewhere.
    sys_msg = {"role": "system", "content": "You are terse."}
    first = {"role": "user", "content": "Task: list the files."}
    names = set()
    for follow in ([], [{"role": "assistant", "content": "a b"}, {"role": "user", "content": "and then?"}]):
        r = requests.post(cluster.url + "/v1/chat/completions", timeout=60,
                          json={"messages": [sys_msg, first, *follow], "max_tokens": 1})
        assert r.status_code == 200 and r.headers["X-Hearth-Affinity"].startswith("prompt "), r.text
        names.add(r.headers["X-Hearth-Replica"])
    assert len(names) == 1


def test_adding_a_replica_moves_only_its_share(cluster, tmp_path):
    """Rendezvous hashing is consistent: with a fourth replica, the sessions that change their
    preferred replica all move to the new one, about a quarter of them."""
    cluster.restore()
    sids = [f"grow-{i}" for i in range(40)]

    def preferred(url):
        out = {}
        for sid in sids:
            r = chat(url, "hi", sid)
            assert r.status_code == 200, r.text
            out[sid] = r.headers["X-Hearth-Affinity"].split()[-1]
        return out

    before = preferred(cluster.url)
    extra = Replica(cluster.hearth_bin, cluster.model, "r3", free_port())
    bigger = Balancer(replica_list(cluster.hearth_bin, cluster.model, [*cluster.replicas, extra]), tmp_path)
    try:
        bigger.start()
        after = preferred(bigger.url)
    finally:
        bigger.stop()
        extra.stop()
    moved = [sid for sid in sids if before[sid] != after[sid]]
    assert all(after[sid] == "r3" for sid in moved), {sid: (before[sid], after[sid]) for sid in moved}
    assert 4 <= len(moved) <= 18, f"{len(moved)} of 40 sessions moved"
    assert len(set(before.values())) == 3


def test_busy_replica_spills_to_the_least_loaded(cluster):
    """One session's burst over balancer.spill_at (16 here: 2 x --max-seqs): the excess goes to
    the other replicas instead of queueing on the session's own."""
    spill_at = cluster.cfg["balancer"]["spill_at"]
    n = spill_at + 8
    barrier = threading.Barrier(n)
    got = [None] * n

    def one(i):
        barrier.wait()
        got[i] = chat(cluster.url, f"burst {i}: count to twenty", session="burst", max_tokens=12)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(r.status_code == 200 for r in got), [r.text for r in got if r.status_code != 200]
    best = {r.headers["X-Hearth-Affinity"].split()[-1] for r in got}
    assert len(best) == 1, best  # one preferred replica for the session
    where = Counter(r.headers["X-Hearth-Replica"] for r in got)
    pref = best.pop()
    assert where[pref] >= spill_at // 2, dict(where)
    assert sum(v for k, v in where.items() if k != pref) >= 1, f"nothing spilled: {dict(where)}"


def test_drained_replica_finishes_its_stream_and_gets_no_new_traffic(cluster):
    cluster.restore()
    victim = cluster.replica("r2")
    sid = session_on(cluster, "r2")
    client = openai.OpenAI(base_url=cluster.url + "/v1", api_key="none", max_retries=0)
    raw = client.chat.completions.with_raw_response.create(
        model="default", messages=[{"role": "user", "content": "Write a very long story about a dragon."}],
        max_tokens=400, temperature=0.8, seed=5, stream=True, extra_headers={"X-Session-Id": sid}, timeout=120)
    assert raw.headers["x-hearth-replica"] == "r2"
    stream = iter(raw.parse())
    first = next(stream)
    assert first.choices
    victim.proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    # The replica: alive, not ready, and new requests get a clear 503 (from the moment its
    # signal thread has taken the SIGTERM: polled, at most 5 s).
    while True:
        ready = requests.get(victim.url + "/health/ready", timeout=5)
        if ready.status_code == 503 or time.monotonic() - t0 > 5:
            break
        time.sleep(0.02)
    assert ready.status_code == 503 and ready.json()["status"] == "draining", ready.text
    assert ready.json()["in_flight"] >= 1
    assert requests.get(victim.url + "/health", timeout=5).status_code == 200
    direct = chat(victim.url, "hi")
    assert direct.status_code == 503, direct.text
    err = direct.json()["error"]
    assert err["code"] == "server_draining" and "draining" in err["message"], err
    assert direct.headers.get("Retry-After")
    # Anthropic's route keeps the 503 too (a balancer retries it elsewhere).
    a = requests.post(victim.url + "/v1/messages", timeout=10,
                      json={"model": "x", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    assert a.status_code == 503 and a.json()["error"]["type"] == "overloaded_error", a.text
    # Through the balancer the conversation goes on elsewhere, at once (503 -> retried) and
    # after the health check took r2 out.
    for _ in range(3):
        r = chat(cluster.url, "next turn", sid)
        assert r.status_code == 200 and r.headers["X-Hearth-Replica"] != "r2", (r.status_code, r.headers, r.text)
    st = cluster.balancer.wait_status({"r2": "DOWN"}, timeout=5)
    assert st["r0"] == st["r1"] == "UP"
    # The stream ends normally, then the replica exits.
    finish = None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    assert finish in ("stop", "length"), finish
    rc = victim.proc.wait(timeout=10)
    assert rc == 0, victim.output()[-2000:]
    assert time.monotonic() - t0 < DRAIN_S
    assert "hearth: drained, stopping" in victim.output()
    cluster.restore()


def test_drain_deadline_ends_requests_in_flight(hearth_bin, default_model):
    rep = Replica(hearth_bin, default_model, "solo", free_port(), drain_s=1)
    try:
        client = openai.OpenAI(base_url=rep.url + "/v1", api_key="none", max_retries=0)
        streams = [iter(client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": f"Write a very long story about dragon {i}."}],
            max_tokens=3000, temperature=0.8, seed=i, stream=True, timeout=60)) for i in range(4)]
        for s in streams:
            next(s)
        t0 = time.monotonic()
        rep.proc.send_signal(signal.SIGTERM)
        endings = []
        for s in streams:
            try:
                finish = None
                for chunk in s:
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
                endings.append(finish)
            except Exception as e:  # the error event the server sends when it stops a request
                endings.append(f"error: {e}")
        rc = rep.proc.wait(timeout=10)
        took = time.monotonic() - t0
        assert rc == 0 and took < 4, (rc, took)
        # Stories cut at the deadline end with an error, as many as the log says were in flight.
        m = re.search(r"drain deadline \(1 s\) passed with (\d+) in flight", rep.output())
        assert m, rep.output()[-2000:]
        cut = [e for e in endings if e is None or e.startswith("error")]
        assert len(cut) == int(m.group(1)) >= 1, (endings, m.group(0))
    finally:
        rep.stop()


def test_killed_replica_loses_only_its_requests_in_flight(cluster):
    cluster.restore()
    victim = cluster.replica("r1")
    killed_at = []
    done_turns = []
    lock = threading.Lock()

    def on_turn(t):
        with lock:
            done_turns.append(t)
            # Kill r1 once a third of the turns are done, with requests on it in flight.
            if len(done_turns) == 12 and not killed_at:
                victim.proc.kill()
                killed_at.append(time.monotonic())

    convs, _ = aw.run_workload(cluster.url + "/v1", conversations=9, turns=4, max_tokens=16, tag="kill",
                               retries=1, on_turn=on_turn)
    assert killed_at, "the workload ended before the kill"
    kill_t = killed_at[0]
    failed = [t for c in convs for t in c.turns if t.error]
    # Only requests r1 had in flight when it died failed, each with an error (none hung: the
    # workload ended), and each conversation's retry went on elsewhere.
    assert failed, "no request was in flight on r1 when it was killed"
    for t in failed:
        assert t.replica in ("r1", ""), summary(convs)
        assert t.start <= kill_t, f"a request sent after the kill failed: {t}"
    assert len(failed) <= 8, summary(convs)
    for c in convs:
        assert len([t for t in c.turns if not t.error]) == 4, f"conversation {c.conv} did not finish: {summary([c])}"
    # After the health check took it out (well under 2 s), nothing more went to r1. The workload may
    # end before then on a fast machine, so later requests are a second workload sent after 2 s.
    time.sleep(max(0.0, kill_t + 2 - time.monotonic()))
    after, _ = aw.run_workload(cluster.url + "/v1", conversations=6, turns=2, max_tokens=8, tag="afterkill")
    late = [t for c in convs + after for t in c.turns if t.start > kill_t + 2]
    assert len(late) >= 12 and all(t.replica != "r1" and not t.error for t in late), summary(convs + after)
    # Conversations never on r1 lost nothing and kept their replica.
    for c in convs:
        if all(t.replica != "r1" for t in c.turns):
            assert len({t.replica for t in c.turns}) == 1 and not any(t.error for t in c.turns)
    assert cluster.balancer.status()["r1"] == "DOWN"
    cluster.restore()
