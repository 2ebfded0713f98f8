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
    /tmp/hagent1/notes.txt faithfully but mangles pytest's long names. The name is fixed: the
    greedy answer depends on it, and with a per-process number some numbers were mangled
    (/tmp/hagent8676 written as /tmp/hagent867)."""
    link = "/tmp/hagent1"
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(tmp_path, link)
    yield link
    os.unlink(link)


def test_write_then_read_across_resume(hearth_bin, default_model, tmp_path, short_dir):
    target = f"{short_dir}/notes.txt"
    p = run_agent(hearth_bin, default_model, tmp_path, "-p", f"Save 'hello hearth' in {target}",
                  "--tool-choice", "write_file", "--yes", "--max-steps", "1", "--max-tokens", "160")
    assert p.returncode == 0, p.stderr
    path, msgs = transcript(tmp_path)
    call = msgs[2]["tool_calls"][0]
    args = json.loads(call["function"]["arguments"])
    assert args["path"] == target
    assert (tmp_path / "notes.txt").read_text() == args["content"]
    assert msgs[3] == {"role": "tool", "tool_call_id": call["id"], "name": "write_file",
                       "content": f"wrote {len(args['content'].encode())} bytes to {target}"}

    p = run_agent(hearth_bin, default_model, tmp_path, "-p", f"Read the file {target}", "--resume", path,
                  "--tool-choice", "read_file", "--max-steps", "1", "--max-tokens", "160")
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


class Tmux:
    """One detached tmux session running a command in its own server socket."""

    def __init__(self, tmp_path, cmd):
        self.tmux = ["tmux", "-S", str(tmp_path / "tmux.sock")]
        self.session = f"hearth_agent_{os.getpid()}"
        subprocess.run([*self.tmux, "new-session", "-d", "-s", self.session, "-x", "200", "-y", "50", "-c",
                        str(tmp_path), shlex.join(cmd)], check=True)
        subprocess.run([*self.tmux, "set-option", "-t", self.session, "remain-on-exit", "on"], check=True)

    def pane(self):
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-J", "-S", "-200", "-t", self.session],
                              capture_output=True, text=True).stdout

    def wait_for(self, pattern, timeout=90, count=1):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.pane()
            if len(re.findall(pattern, text)) >= count:
                return text
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} in the pane:\n{self.pane()}")

    def keys(self, *keys):
        subprocess.run([*self.tmux, "send-keys", "-t", self.session, *keys], check=True)

    def send(self, text):
        subprocess.run([*self.tmux, "send-keys", "-t", self.session, "-l", text], check=True)
        self.keys("Enter")

    def close(self):
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_tmux_ctrl_c_stops_the_shell_command_not_the_agent(hearth_bin, default_model, tmp_path):
    # The default system prompt: with it the model copies "sleep 30" as given.
    t = Tmux(tmp_path, [str(hearth_bin), "agent", "-m", str(default_model), "--log-dir", str(tmp_path / "logs"),
                        "--temperature", "0", "--max-tokens", "30", "--tool-choice", "run_shell", "--allow", "sleep",
                        "--max-steps", "1"])
    try:
        t.wait_for(r"(?m)^> $")
        t.send("Run the shell command: sleep 30")
        # The tiny model may shorten the number; any sleep of 2 s or more leaves time for Ctrl-C.
        text = t.wait_for(r"\[tool\] run_shell \{\"command\":\"sleep \d+\"\}")
        assert int(re.search(r'"sleep (\d+)"', text).group(1)) >= 2, text
        time.sleep(0.3)
        start = time.monotonic()
        t.keys("C-c")
        t.wait_for(r"\[interrupted by the user \(Ctrl-C\)\]", timeout=10)
        t.wait_for(r"(?m)^> $", timeout=10)
        assert time.monotonic() - start < 10
        t.send("quit")
        t.wait_for(r"server stopped")
        _, msgs = transcript(tmp_path)
        assert msgs[-1]["role"] == "tool" and msgs[-1]["content"].endswith("[interrupted by the user (Ctrl-C)]")
    finally:
        t.close()


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_tmux_session(hearth_bin, default_model, tmp_path):
    t = Tmux(tmp_path, agent_args(hearth_bin, default_model, tmp_path, "--max-tokens", "24"))
    try:
        text = t.wait_for(r"(?m)^> $")
        pid = server_pids(text)[0]
        assert pid_alive(pid)
        t.send("What is the capital of France?")
        text = t.wait_for(STATUS_RE.pattern)
        answer = text.split("What is the capital of France?")[1].split("[step 1/15")[0]
        assert answer.strip(), text  # streamed text before the status line
        t.send("think")
        t.wait_for(r"\[thinking on\]")
        t.send("/think Why is the sky blue?")
        t.wait_for(STATUS_RE.pattern, count=2)
        t.send("no_think")
        t.wait_for(r"\[thinking off\]")
        t.send("clear")
        t.wait_for(r"\[conversation cleared\]")
        t.send("quit")
        t.wait_for(r"server stopped")
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not pid_alive(pid)
        path, msgs = transcript(tmp_path)  # after the clear: only the system prompt
        assert [m["role"] for m in msgs] == ["system"]
        assert '{"event":"clear"}' in path.read_text()
    finally:
        t.close()


class FakeOpenAI:
    """A scripted OpenAI-compatible server (no /tokenize, no window in /v1/models): each chat
    request takes the next status from `script` (200 streams "hello" with usage)."""

    def __init__(self, script):
        import http.server

        self.script = list(script)
        self.bodies = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(200, "application/json", json.dumps({"object": "list", "data": [{"id": "fake"}]}))
                else:
                    self._send(404, "application/json", "{}")

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path != "/v1/chat/completions":
                    self._send(404, "application/json", '{"error":{"message":"no such route"}}')
                    return
                outer.bodies.append(body)
                status = outer.script.pop(0) if outer.script else 200
                if status != 200:
                    self._send(status, "application/json", json.dumps({"error": {"message": f"scripted {status}"}}))
                    return
                events = [{"choices": [{"index": 0, "delta": {"content": "hel"}}]},
                          {"choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}]},
                          {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 2}}]
                text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
                self._send(200, "text/event-stream", text)

            def _send(self, status, ctype, text):
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def test_url_mode_retries_5xx_and_gives_up_after_three(hearth_bin, tmp_path):
    fake = FakeOpenAI([500, 503, 502, 500, 200])
    try:
        p = subprocess.run([str(hearth_bin), "agent", "--url", fake.url + "/v1", "--log-dir", str(tmp_path / "logs"),
                            "--ctx", "4096", "--no-think"],
                           input="first question\nsecond question\nquit\n", capture_output=True, text=True,
                           timeout=60, cwd=tmp_path)
    finally:
        fake.close()
    assert p.returncode == 0, p.stderr
    out = p.stdout
    # Message 1: three failures -> back to the prompt; message 2: one more 500, then the answer.
    assert out.count("[request failed: HTTP 5") == 4, out
    assert "[retrying in 0.50 s (attempt 2 of 3)]" in out and "[retrying in 1.00 s (attempt 3 of 3)]" in out
    assert "[3 failures in a row; giving up on this message (the conversation is kept)]" in out
    assert "hello" in out
    assert re.search(r"\[step 1/15 \| context 42/4096 \(1%\) \| 2 tokens \|", out), out
    assert len(fake.bodies) == 5
    last = fake.bodies[-1]
    assert [m["content"] for m in last["messages"] if m["role"] == "user"] == ["first question", "second question"]
    assert last["model"] == "fake" and last["stream"] is True
    assert last["chat_template_kwargs"] == {"enable_thinking": False}
    assert {t["function"]["name"] for t in last["tools"]} == {"run_shell", "read_file", "write_file", "edit_file",
                                                              "list_dir", "search_files"}
    assert "tool_choice" not in last


def test_bad_options_and_bad_transcript_are_refused(hearth_bin, tmp_path):
    def run(*args):
        return subprocess.run([str(hearth_bin), "agent", "--log-dir", str(tmp_path / "logs"), *map(str, args)],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)

    p = run("--tool-choice", "fly", "--no-server")
    assert p.returncode == 2 and "--tool-choice must be auto, required, none or a tool name" in p.stderr
    p = run("--url", "http://127.0.0.1:1", "--threads", "2")
    assert p.returncode == 2 and "--threads applies to the server the agent starts" in p.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{"role": "user", "content": \n')
    fake = FakeOpenAI([])
    try:
        p = run("--url", fake.url, "--resume", bad, "-p", "x")
    finally:
        fake.close()
    assert p.returncode == 2 and f"--resume: {bad}:2: not JSON at offset" in p.stderr, p.stderr


def test_killed_agent_leaves_no_server(hearth_bin, default_model, tmp_path):
    # PR_SET_PDEATHSIG: a SIGKILLed agent cannot stop its server; the kernel does.
    proc = subprocess.Popen(agent_args(hearth_bin, default_model, tmp_path), cwd=tmp_path, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        line, deadline = "", time.monotonic() + 60
        while not SERVER_RE.search(line) and time.monotonic() < deadline:
            line = proc.stderr.readline()
        pid = int(SERVER_RE.search(line).group(1))
        assert pid_alive(pid)
        proc.kill()
        proc.wait(10)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(pid)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_spec_reaches_the_server_it_starts(hearth_bin, default_model, tmp_path):
    # --spec goes to the server the agent starts; the status line shows what it drafted.
    p = run_agent(hearth_bin, default_model, tmp_path, "-p",
                  "Repeat exactly: one two three four five one two three four five one two three",
                  "--spec", "ngram", "--spec-max", "6", "--max-steps", "1", "--max-tokens", "40")
    assert p.returncode == 0, p.stderr
    m = re.search(r"\| (\d+) of (\d+) drafted accepted\]", p.stdout)
    assert m and 0 < int(m.group(2)) and int(m.group(1)) <= int(m.group(2)), p.stdout
    # A bad value is the server's clear error, shown by the agent.
    p = run_agent(hearth_bin, default_model, tmp_path, "-p", "hi", "--spec", "bogus")
    assert p.returncode != 0
    assert "unknown --spec 'bogus' (expected ngram, draft, mtp or off)" in p.stderr, p.stderr
    # Not with a server it does not start.
    p = subprocess.run([str(hearth_bin), "agent", "--url", "http://127.0.0.1:1", "--spec", "ngram"],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "--spec applies to the server the agent starts" in p.stderr, p.stderr
