#!/usr/bin/env python3
"""Device memory of a multi-model hearth server on a GPU (issue 38), measured by nvidia-smi.

Against `hearth serve --models-dir DIR --max-device-memory SIZE ...` whose budget fits one of
the folder's two models but not both: a request for A loads it; a request for B must unload A
first (the budget), and the process's device memory stays about one model's; POST
/models/unload of B leaves only the CUDA context (the floor), and loading and unloading A again
returns to that floor (within 5 % of a model).
Checks /v1/models states along the way. Standard library only; prints one JSON object and
exits 1 when a check fails.

Usage: device_memory_check.py URL SERVER_PID MODEL_A MODEL_B
"""
import json
import subprocess
import sys
import time
import urllib.request


def call(url, path, body=None, timeout=300):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def used_mib(pid):
    """The process's device memory (MiB) as the driver reports it; 0 while it holds none."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return sum(int(m) for p, m in (line.split(",") for line in out.strip().splitlines() if line) if int(p) == pid)


def states(url):
    return {m["id"]: m["status"] for m in call(url, "/v1/models")["data"] if "alias_of" not in m}


def ask(url, model):
    call(url, "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": "Hi"}],
                                       "max_tokens": 1, "temperature": 0})
    time.sleep(1.0)  # let an unload of the other model finish freeing


def main():
    url, pid, a, b = sys.argv[1].rstrip("/"), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    for _ in range(300):
        try:
            call(url, "/v1/models", timeout=5)
            break
        except Exception:
            time.sleep(0.5)
    r = {"baseline_mib": used_mib(pid)}  # before any model: no CUDA context yet (0)
    ask(url, a)
    r["a_loaded_mib"], r["states_after_a"] = used_mib(pid), states(url)
    ask(url, b)
    r["b_loaded_mib"], r["states_after_b"] = used_mib(pid), states(url)
    call(url, "/models/unload", {"model": b})
    time.sleep(2.0)
    # No model loaded: what is left is the CUDA runtime's own context (it stays for the process).
    r["floor_mib"], r["states_after_unload"] = used_mib(pid), states(url)
    ask(url, a)
    r["a_again_mib"] = used_mib(pid)
    call(url, "/models/unload", {"model": a})
    time.sleep(2.0)
    r["after_cycle_mib"] = used_mib(pid)
    model_mib = r["a_loaded_mib"] - r["floor_mib"]
    r["checks"] = {
        "one model at a time": r["b_loaded_mib"] <= r["a_loaded_mib"] * 1.05
        and r["states_after_b"] == {a: "unloaded", b: "loaded"},
        "an unload frees the model (only the CUDA context stays, < 1 GiB)": r["floor_mib"] < 1024,
        "a load + unload cycle returns to the floor within 5% of a model":
            abs(r["after_cycle_mib"] - r["floor_mib"]) <= 0.05 * model_mib,
    }
    print(json.dumps(r))
    sys.exit(0 if all(r["checks"].values()) else 1)


if __name__ == "__main__":
    main()
