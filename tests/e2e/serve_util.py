"""Helpers for the `hearth serve` end-to-end tests: start/stop the real server, raw HTTP over
sockets (byte-exact SSE), and Prometheus text parsing. Every wait has a timeout."""
import json
import os
import pathlib
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

LISTEN_RE = re.compile(r"hearth: listening on http://([\d.]+):(\d+)")
REPO = pathlib.Path(__file__).resolve().parents[2]


def tiny_hybrid_hf(parent, shared_dir):
    """The tiny random-weight Qwen3.5 (hybrid Gated DeltaNet) checkpoint the end-to-end tests
    share, as a Hugging Face folder parent/hf (benchmarks/make_qwen35_model.py, seed 3)."""
    out = pathlib.Path(parent) / "hf"
    subprocess.run([sys.executable, str(REPO / "benchmarks/make_qwen35_model.py"), str(out),
                    "--shared", str(pathlib.Path(shared_dir) / "data"),
                    "--hidden", "64", "--layers", "4", "--intermediate", "128", "--heads", "2",
                    "--kv-heads", "1", "--head-dim", "32", "--linear-key-heads", "2",
                    "--linear-key-dim", "16", "--linear-value-dim", "16", "--dtype", "f32",
                    "--std", "0.5", "--seed", "3"],
                   check=True, capture_output=True, text=True, timeout=300)
    return out


def tiny_hybrid_gguf(hf, hearth_bin):
    """tiny_hybrid_hf's folder converted by `hearth convert --type f32` (next to it)."""
    gguf = pathlib.Path(hf).parent / "tiny.f32.gguf"
    p = subprocess.run([str(hearth_bin), "convert", str(hf), "-o", str(gguf), "--type", "f32"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return gguf


class Server:
    """One `hearth serve --port 0` process. stop() sends SIGTERM and returns the exit code."""

    def __init__(self, hearth_bin, model, *args, start_timeout=90):
        # $HEARTH_E2E_SERVE_ARGS: more options for every server (e.g. "--deterministic" when the
        # suite runs against a GPU, where greedy results are batch-invariant only under that flag).
        extra = shlex.split(os.environ.get("HEARTH_E2E_SERVE_ARGS", ""))
        self.args = [str(hearth_bin), "serve", "-m", str(model), "--port", "0", *map(str, args), *extra]
        # stderr (the request log) goes to a file so a full pipe can never block the server.
        self.stderr_file = tempfile.TemporaryFile(mode="w+b")
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self.stderr_file,
                                     stdin=subprocess.DEVNULL)
        self.stdout_lines = []
        self._listening = threading.Event()
        self.host = self.port = None
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + start_timeout
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"hearth serve did not start (rc={self.proc.returncode}): "
                                   f"stdout={self.stdout_lines!r} stderr={self.stderr()[-2000:]!r}")
        self.url = f"http://{self.host}:{self.port}"
        # The listening line comes before the accept loop runs: wait for /health too.
        while True:
            try:
                if http_get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("hearth serve never answered /health 200")
            time.sleep(0.05)

    def _read_stdout(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.stdout_lines.append(line)
            m = LISTEN_RE.search(line)
            if m and not self._listening.is_set():
                self.host, self.port = m.group(1), int(m.group(2))
                self._listening.set()

    def stderr(self):
        self.stderr_file.seek(0)
        return self.stderr_file.read().decode("utf-8", "replace")

    def terminate(self):
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout):
        """The exit code, or None when the process is still running after `timeout` s."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=8):
        """SIGTERM; returns (exit code or None if it did not exit in time, seconds taken)."""
        if self.proc.poll() is not None:
            return self.proc.returncode, 0.0
        t0 = time.monotonic()
        self.terminate()
        rc = self.wait(timeout)
        took = time.monotonic() - t0
        if rc is None:
            self.kill()
        return rc, took

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


# ---------------------------------------------------------------------------
# Raw HTTP over a socket: the exact bytes the server sends.


class RawResponse:
    def __init__(self, status, reason, headers, body):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def header(self, name):
        return self.headers.get(name.lower())


class RawStream:
    """A POST over a plain socket (Connection: close). Reads the status line and headers on
    open; then body bytes on demand, de-chunked when Transfer-Encoding is chunked."""

    def __init__(self, url_host, port, path, body, headers=None, timeout=30, read_head=True):
        self.sock = socket.create_connection((url_host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        lines = [f"POST {path} HTTP/1.1", f"Host: {url_host}:{port}", "Content-Type: application/json",
                 f"Content-Length: {len(data)}", "Connection: close"]
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
        self._buf = b""
        self._eof = False
        self.body = b""  # de-chunked body bytes read so far
        self.body_done = False
        if read_head:
            self.read_head()

    def read_head(self):
        head = self._read_until(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = status_line.split(" ", 2)
        self.status = int(parts[1])
        self.reason = parts[2] if len(parts) > 2 else ""
        self.headers = {}
        for h in header_lines:
            k, _, v = h.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self._remaining = int(self.headers["content-length"]) if "content-length" in self.headers else None

    def _fill(self):
        if self._eof:
            return False
        got = self.sock.recv(65536)
        if not got:
            self._eof = True
            return False
        self._buf += got
        return True

    def _read_until(self, marker):
        while marker not in self._buf:
            if not self._fill():
                raise ConnectionError(f"connection closed before {marker!r}; got {self._buf[:200]!r}")
        i = self._buf.index(marker)
        out, self._buf = self._buf[:i], self._buf[i + len(marker):]
        return out

    def _read_exact(self, n):
        while len(self._buf) < n:
            if not self._fill():
                raise ConnectionError("connection closed mid-body")
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def read_some(self):
        """Appends the next piece of the body to self.body; False when the body is complete
        (or the connection closed)."""
        if self.body_done:
            return False
        if self.chunked:
            size_line = self._read_until(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                self._read_until(b"\r\n")  # the (empty) trailer section
                self.body_done = True
                return False
            self.body += self._read_exact(size)
            assert self._read_exact(2) == b"\r\n", "bad chunk terminator"
            return True
        if self._remaining is not None:
            if self._remaining == 0:
                self.body_done = True
                return False
            if not self._buf and not self._fill():
                raise ConnectionError("connection closed mid-body")
            take = self._buf[: self._remaining]
            self._buf = self._buf[len(take):]
            self._remaining -= len(take)
            self.body += take
            return True
        if self._buf or self._fill():
            self.body += self._buf
            self._buf = b""
            return True
        self.body_done = True
        return False

    def read_events(self, n):
        """Reads until the body holds at least n complete SSE events (or ends)."""
        while self.body.count(b"\n\n") < n and self.read_some():
            pass
        return self.body.count(b"\n\n") >= n

    def read_all(self):
        while self.read_some():
            pass
        return self.body

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def raw_post(server, path, body, headers=None, timeout=30):
    s = RawStream(server.host, server.port, path, body, headers=headers, timeout=timeout)
    try:
        s.read_all()
        return s
    finally:
        s.close()


SSE_EVENT_RE = re.compile(rb"data: ([^\n]+)\n\n")


def split_sse(body):
    """The payloads of a byte-exact SSE body; raises AssertionError on anything else."""
    events, pos = [], 0
    while pos < len(body):
        m = SSE_EVENT_RE.match(body, pos)
        assert m, f"bad SSE framing at byte {pos}: {body[pos:pos + 120]!r}"
        events.append(m.group(1).decode("utf-8"))
        pos = m.end()
    return events


# ---------------------------------------------------------------------------
# /metrics

METRIC_LINE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def parse_metrics(text):
    """{'name' or 'name{labels}': value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = METRIC_LINE_RE.match(line)
        assert m, f"bad metrics line: {line!r}"
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def http(method, url, **kw):
    """One request with 'Connection: close' (the body is read before returning): an idle
    keep-alive connection left open would delay the server's exit after SIGTERM by 5 s (see
    test_sigterm_with_idle_keepalive_client_exits_fast)."""
    kw.setdefault("timeout", 60)
    kw["headers"] = {"Connection": "close", **(kw.get("headers") or {})}
    r = requests.request(method, url, **kw)
    _ = r.content
    r.close()
    return r


def http_get(url, **kw):
    return http("GET", url, **kw)


def http_post(url, **kw):
    return http("POST", url, **kw)


def metrics(server):
    r = http_get(server.url + "/metrics", timeout=10)
    assert r.status_code == 200, r.text
    return parse_metrics(r.text)


def wait_for(pred, timeout, interval=0.02):
    """Polls pred() until truthy; returns its last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


def assert_error_shape(resp_json, status=None):
    assert set(resp_json) == {"error"}, resp_json
    err = resp_json["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    assert err["param"] is None or isinstance(err["param"], str), err
    assert err["code"] is None or isinstance(err["code"], str), err
    return err
