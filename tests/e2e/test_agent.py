"""`hearth agent` end to end: the real binary starts its own `hearth serve` on the default model
(SmolLM2-135M) in a temporary directory; `--tool-choice` forces the tool under test and
`--temperature 0` keeps the tiny model's arguments stable. Covers: the shell tool with capped output,
write then read (across --resume), SIGKILL of the server mid-answer (restart, the step completes),
trimming past 80 % of the window, and a tmux-driven interactive session."""
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time

import pytest
import requests

SERVER_RE = re.compile(r"server pid (\d+) at (http://[\d.]+:\d+)")
STATUS_RE = re.compile(r"\[step (\d+)/(\d+) \| context (\d+)/(\d+) \((\d+)%\) \| (\d+) tokens \| [\d.]+ s \| [\d.]+ tok/s\]")


def agent_args(hearth_bin, model, tmp_path, *extra):
    return [str(hearth_bin), "agent", "-m", str(model), "--log-dir", str(tmp_path / "logs"), "--temperature", "0",
            "--system", "You are a helpful assistant.", *map(str, extra)]


def run_agent(hearth_bin, model, tmp_path, *extra, timeout=120):
    return subprocess.run(agent_args(hearth_bin, model, tmp_path, *extra), cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def transcript(tmp_path):
    files = sorted((tmp_path / "logs").glob("agent-*.jsonl"))
    assert files, "no transcript written"
    msgs = []
    for line in files[-1].read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            msgs = [] if entry.get("event") == "clear" else msgs + [entry]
    return files[-1], msgs


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): look at its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def server_pids(text):
    return [int(m.group(1)) for m in SERVER_RE.finditer(text)]


def test_shell_tool_output_is_capped(hearth_bin, default_model, tmp_path):
    # seq is on --allow, so no question is asked; stdin is closed, so any other command is declined.
    p = run_agent(hearth_bin, default_model, tmp_path, "-p", "Run the shell command: seq 1 3000", "--tool-choice",
                  "run_shell", "--allow", "seq", "--tool-output-chars", "200", "--max-steps", "1", "--max-tokens", "40")
    assert p.returncode == 0, p.stderr
    _, msgs = transcript(tmp_path)
    calls = msgs[2]["tool_calls"]
    assert calls[0]["function"]["name"] == "run_shell"
    assert json.loads(calls[0]["function"]["arguments"])["command"] == "seq 1 3000"
    result = next(m for m in msgs if m["role"] == "tool" and m["tool_call_id"] == calls[0]["id"])["content"]
    full = "".join(f"{i}\n" for i in range(1, 3001))
    m = re.search(r"\n\[\.\.\. (\d+) characters cut \.\.\.\]\n", result)
    assert m, result
    assert int(m.group(1)) == len(full) - 200
    assert result.startswith(full[:100]) and result.endswith(full[-100:] + "[exit status 0]")
    assert "[stopped at --max-steps 1]" in p.stdout
    assert STATUS_RE.search(p.stdout), p.stdout
    # The server it started is gone.
    assert not any(pid_alive(pid) for pid in server_pids(p.stderr))


@pytest.fixture
def short_dir(tmp_path):
    """A short absolute path to tmp_path (a symlink): the tiny model copies a plain path like
    /tmp/hagent123/notes.txt faithfully but mangles pytest's long names."""
    link = f"/tmp/hagent{os.getpid()}"
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(tmp_path, link)
    yield link
    os.unlink(link)


def test_write_then_read_across_resume(hearth_bin, default_model, tmp_path, short_dir):
    target = f"{short_dir}/notes.txt"
    p = run_agent(hearth_bin, default_model, tmp_path, "-p", f"Write the text 'hello hearth' to the file {target}",
                  "--tool-choice", "write_file", "--yes", "--max-steps", "1", "--max-tokens", "60")
    assert p.returncode == 0, p.stderr
    path, msgs = transcript(tmp_path)
    call = msgs[2]["tool_calls"][0]
    args = json.loads(call["function"]["arguments"])
    assert args["path"] == target
    assert (tmp_path / "notes.txt").read_text() == args["content"]
    assert msgs[3] == {"role": "tool", "tool_call_id": call["id"], "name": "write_file",
                       "content": f"wrote {len(args['content'].encode())} bytes to {target}"}

    p = run_agent(hearth_bin, default_model, tmp_path, "-p", f"Read the file {target}", "--resume", path,
                  "--tool-choice", "read_file", "--max-steps", "1", "--max-tokens", "60")
    assert p.returncode == 0, p.stderr
    _, msgs2 = transcript(tmp_path)  # the same file, appended to
    n = len([m for m in msgs if m["role"] != "tool"]) + len([m for m in msgs if m["role"] == "tool"])
    assert msgs2[:n] == msgs and msgs2[n]["role"] == "user"
    call = msgs2[n + 1]["tool_calls"][0]
    assert call["function"]["name"] == "read_file"
    assert json.loads(call["function"]["arguments"])["path"] == target
    assert msgs2[n + 2] == {"role": "tool", "tool_call_id": call["id"], "name": "read_file",
                            "content": args["content"]}


def metric(url, name):
    text = requests.get(url + "/metrics", timeout=2).text
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_server_killed_mid_answer_is_restarted(hearth_bin, default_model, tmp_path):
    # A long question makes the answer's prefill take a while: the kill lands while it runs.
    question = "Summarize this text. " + " ".join(f"Line {i} of the report says the weather was fine." for i in range(30))
    proc = subprocess.Popen(agent_args(hearth_bin, default_model, tmp_path, "-p", question, "--max-tokens", "16"),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    err_lines = []
    reader = threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        first = None
        while first is None and time.monotonic() < deadline:
            m = SERVER_RE.search("".join(err_lines))
            if m:
                first = (int(m.group(1)), m.group(2))
            time.sleep(0.05)
        assert first, "".join(err_lines)
        pid, url = first
        while time.monotonic() < deadline and metric(url, "hearth_requests_running") < 1:
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    assert proc.returncode == 0, out + "".join(err_lines)
    assert "[the server died (killed by signal 9)" in out, out
    assert "[restarting the server]" in out
    m = re.search(r"\[server restarted: pid (\d+)", out)
    assert m and int(m.group(1)) != pid
    assert STATUS_RE.search(out), out  # the step completed after the restart
    _, msgs = transcript(tmp_path)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert not pid_alive(int(m.group(1)))


def test_context_past_80_percent_is_trimmed(hearth_bin, default_model, tmp_path):
    # A resumed conversation far larger than 80 % of a 1536-token window.
    old = tmp_path / "old.jsonl"
    lines = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(12):
        lines.append({"role": "user", "content": f"Question {i}: " + "tell me about the sea. " * 20})
        lines.append({"role": "assistant", "content": f"Answer {i}: " + "the sea is large and blue. " * 20})
    old.write_text("".join(json.dumps(x) + "\n" for x in lines))
    p = run_agent(hearth_bin, default_model, tmp_path, "--ctx", "1536", "--resume", old, "-p", "Say hello.",
                  "--max-tokens", "20")
    assert p.returncode == 0, p.stdout + p.stderr
    m = re.search(r"\[context: dropped the (\d+) oldest of (\d+) messages to stay under 80% of the window "
                  r"\((\d+)/1536 tokens\)\]", p.stdout)
    assert m, p.stdout
    assert int(m.group(2)) == len(lines) + 1 and int(m.group(1)) >= 2
    assert int(m.group(3)) <= 1536 * 0.8
    s = STATUS_RE.search(p.stdout)
    assert s and int(s.group(4)) == 1536 and int(s.group(3)) <= 1536, p.stdout
    assert "request failed" not in p.stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_tmux_session(hearth_bin, default_model, tmp_path):
    session = f"hearth_agent_{os.getpid()}"
    sock = str(tmp_path / "tmux.sock")
    tmux = ["tmux", "-S", sock]
    cmd = shlex.join(agent_args(hearth_bin, default_model, tmp_path, "--max-tokens", "24"))
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "200", "-y", "50", "-c", str(tmp_path), cmd],
                   check=True)
    subprocess.run([*tmux, "set-option", "-t", session, "remain-on-exit", "on"], check=True)

    def pane():
        return subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-200", "-t", session], capture_output=True,
                              text=True).stdout

    def wait_for(pattern, timeout=90, count=1):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = pane()
            if len(re.findall(pattern, text)) >= count:
                return text
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in the pane:\n{pane()}")

    def send(text):
        subprocess.run([*tmux, "send-keys", "-t", session, "-l", text], check=True)
        subprocess.run([*tmux, "send-keys", "-t", session, "Enter"], check=True)

    try:
        text = wait_for(r"(?m)^> $")
        pid = server_pids(text)[0]
        assert pid_alive(pid)
        send("What is the capital of France?")
        text = wait_for(STATUS_RE.pattern)
        answer = text.split("What is the capital of France?")[1].split("[step 1/15")[0]
        assert answer.strip(), text  # streamed text before the status line
        send("think")
        wait_for(r"\[thinking on\]")
        send("/think Why is the sky blue?")
        wait_for(STATUS_RE.pattern, count=2)
        send("no_think")
        wait_for(r"\[thinking off\]")
        send("clear")
        wait_for(r"\[conversation cleared\]")
        send("quit")
        wait_for(r"server stopped")
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(pid)
        path, msgs = transcript(tmp_path)  # after the clear: only the system prompt
        assert [m["role"] for m in msgs] == ["system"]
        assert '{"event":"clear"}' in path.read_text()
        print(text)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
