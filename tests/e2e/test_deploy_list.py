"""deploy/hearth_deploy.py: a bad list of replicas is refused with the field named; a good one
gives an HAProxy configuration the real haproxy accepts (when installed), systemd units and the
start commands. (The configuration at work: tests/e2e/test_replicas.py.)"""
import importlib.util
import json
import shutil
import subprocess

import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("hearth_deploy", ROOT / "deploy" / "hearth_deploy.py")
deploy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(deploy)

GOOD = {"model": "/m.gguf", "replicas": [{"name": "gpu0", "port": 8100, "device": "cuda:0"},
                                          {"name": "gpu1", "port": 8101, "device": "cuda:1"}]}


@pytest.mark.parametrize("change, words", [
    (lambda d: d.pop("model"), "'model'"),
    (lambda d: d.update(replicas=[]), "'replicas' must be a non-empty list"),
    (lambda d: d["replicas"].append({"name": "gpu0", "port": 8102}), "the name 'gpu0' is used twice"),
    (lambda d: d["replicas"].append({"name": "gpu2", "port": 8101}), "127.0.0.1:8101 is used twice"),
    (lambda d: d["replicas"][1].update(port=70000), "replicas[1] (gpu1): 'port'"),
    (lambda d: d["replicas"][0].update(name="gpu 0"), "replicas[0]: 'name'"),
    (lambda d: d["replicas"][0].update(gpu=1), "replicas[0]: unknown field 'gpu'"),
    (lambda d: d.update(balancer={"bind": "8080"}), "balancer.bind: '8080' is not HOST:PORT"),
    (lambda d: d.update(balancer={"maxconn_per_replica": 100}), "maxconn_per_replica must be in [1, max_seqs + max_queue = 72]"),
    (lambda d: d.update(balancer={"spill_at": 80}), "spill_at must be in [1, maxconn_per_replica = 72]"),
    (lambda d: d.update(max_seqs=0), "'max_seqs' must be a positive integer"),
    (lambda d: d.update(modle="x"), "unknown field 'modle'"),
])
def test_bad_list_is_refused_naming_the_field(change, words):
    d = json.loads(json.dumps(GOOD))
    change(d)
    with pytest.raises(deploy.ListError) as e:
        deploy.load_list(d)
    assert words in str(e.value)


def test_bad_file_names_the_file_and_place(tmp_path):
    p = tmp_path / "list.json"
    p.write_text('{"model": "m",\n "replicas": [}')
    r = subprocess.run(["python3", str(ROOT / "deploy" / "hearth_deploy.py"), "haproxy", str(p)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and f"{p}: not JSON" in r.stderr and "line 2" in r.stderr, r.stderr


def test_good_list_renders_every_part(tmp_path):
    cfg = deploy.load_list(GOOD)
    assert cfg["balancer"]["spill_at"] == 16 and cfg["balancer"]["maxconn_per_replica"] == 72
    text = deploy.render_haproxy(cfg)
    for name, port in (("gpu0", 8100), ("gpu1", 8101)):
        assert f"server {name} 127.0.0.1:{port}" in text
        assert f"use-server {name} if {{ var(txn.best) -m str {name} }} {{ srv_conn(hearth_replicas/{name}) lt 16 }}" in text
    assert "balance leastconn" in text and "option httpchk GET /health/ready" in text
    rr = deploy.render_haproxy(cfg, affinity=False)
    assert "balance roundrobin" in rr and "use-server" not in rr
    haproxy = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
    if haproxy:  # the real parser accepts both
        for t in (text, rr):
            (tmp_path / "h.cfg").write_text(t)
            r = subprocess.run([haproxy, "-c", "-q", "-f", str(tmp_path / "h.cfg")], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
    units = deploy.render_systemd(cfg)
    assert set(units) == {"hearth-gpu0.service", "hearth-gpu1.service", "hearth.target"}
    assert "--device cuda:1" in units["hearth-gpu1.service"] and "--drain-seconds 30" in units["hearth-gpu1.service"]
    assert "Wants=hearth-gpu0.service hearth-gpu1.service" in units["hearth.target"]
    cmds = deploy.render_commands(cfg)
    assert cmds.count("hearth serve -m /m.gguf") == 2 and "haproxy -f haproxy.cfg" in cmds
    assert "8100" in deploy.render_prometheus(cfg) and "cuda:0" not in deploy.render_prometheus(cfg)
    assert 'device_ids: ["1"]' in deploy.render_compose(cfg)


@pytest.mark.parametrize("name", ["replicas.example.json", "replicas.local.json"])
def test_shipped_lists_are_valid(name):
    cfg = deploy.load_list(ROOT / "deploy" / name)
    assert deploy.render_haproxy(cfg).count("\n  server ") == len(cfg["replicas"])
