"""Hostile and malformed input against the real `hearth serve` (issue 16).

Part 1, a battery of >= 300 bad JSON requests generated from the tables below: every
endpoint (chat/completions, completions, messages, count_tokens, tokenize, detokenize)
with malformed JSON, invalid UTF-8, lone surrogates, deep nesting, non-finite and huge
numbers, and each field given a wrong type or an out-of-range value. Each must get its
precise 4xx in the endpoint's error shape (OpenAI: {"error": {message, type, param}};
Anthropic: {"type": "error", "error": {type, message}}), naming the field; the server
must still answer a normal request afterwards.

Part 2, raw sockets against the HTTP limits (--request-timeout, --max-header-bytes,
--max-body-bytes, --max-connections): slowloris header trickle, a body never finished,
oversize header and body, too many connections, bad chunked encoding. Other clients
must be served meanwhile.
"""
import json
import socket
import subprocess
import threading
import time

import pytest
import requests

from serve_util import Server

REQUEST_TIMEOUT = 2.0
MAX_CONNECTIONS = 24
MAX_HEADER = 8192
MAX_BODY = 256 * 1024

ANTHROPIC = {"/v1/messages", "/v1/messages/count_tokens"}

BASE = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    "/v1/completions": {"model": "m", "prompt": "hi", "max_tokens": 1},
    "/v1/messages": {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/messages/count_tokens": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/tokenize": {"content": "hi"},
    "/detokenize": {"tokens": [1, 2]},
}

# Bodies that are not a valid JSON object, the same for every endpoint: (name, raw bytes).
DEPTH = 5000
MALFORMED = [
    ("empty", b""),
    ("null", b"null"),
    ("array", b"[]"),
    ("number", b"42"),
    ("string", b'"x"'),
    ("unterminated_object", b"{"),
    ("missing_value", b'{"a":}'),
    ("trailing_comma", b'{"a":1,}'),
    ("trailing_garbage", b'{} x'),
    ("single_quotes", b"{'a': 1}"),
    ("comment", b'{/* c */"a":1}'),
    ("invalid_utf8_ff", b'{"model":"\xff"}'),
    ("invalid_utf8_overlong", b'{"model":"\xc0\xaf"}'),
    ("invalid_utf8_truncated", b'{"model":"\xe2\x82"}'),
    ("invalid_utf8_surrogate_bytes", b'{"model":"\xed\xa0\x80"}'),
    ("invalid_utf8_in_key", b'{"\xfe":1}'),
    ("lone_high_surrogate", b'{"model":"\\ud800"}'),
    ("lone_low_surrogate", b'{"model":"\\udc00"}'),
    ("high_then_letter", b'{"model":"\\ud800\\u0041"}'),
    ("short_unicode_escape", b'{"model":"\\u12"}'),
    ("bad_escape", b'{"model":"\\x41"}'),
    ("raw_control_char", b'{"model":"a\x01b"}'),
    ("nan_literal", b'{"temperature":NaN}'),
    ("infinity_literal", b'{"temperature":Infinity}'),
    ("minus_infinity_literal", b'{"temperature":-Infinity}'),
    ("deep_arrays", b'{"x":' + b"[" * DEPTH + b"]" * DEPTH + b"}"),
    ("deep_objects", b'{"x":' + b'{"a":' * DEPTH + b"1" + b"}" * DEPTH + b"}"),
    ("utf16_body", '{"a":1}'.encode("utf-16")),
    ("nul_byte_raw", b'{"a":1}\x00'),
    ("nul_then_garbage", b'{"a":1}\x00{"b":'),
]

# Wrong values for a field: (label, value). "num" = an out-of-range value where given.
WRONG = {
    "str": [("int", 1), ("bool", True), ("array", []), ("object", {})],
    "int": [("string", "1"), ("fraction", 1.5), ("bool", True), ("array", []), ("huge", 1e300),
            ("huge_int", 10**30)],
    "num": [("string", "0.5"), ("bool", False), ("array", [1]), ("object", {})],
    "bool": [("string", "true"), ("int", 1), ("array", []), ("object", {})],
    "array": [("string", "x"), ("int", 3), ("object", {}), ("bool", True)],
    "object": [("string", "x"), ("int", 3), ("array", []), ("bool", True)],
}

# (endpoint, field path, kind, extra out-of-range values). A path "a.0.b" sets BASE[a][0][b].
C, T, M, N = "/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens"
FIELDS = [
    (C, "model", "str", []),
    (C, "messages", "array", [[]]),
    (C, "messages.0", "object", []),
    (C, "messages.0.role", "str", ["wizard", ""]),
    (C, "messages.0.content", "str", [[{"type": "image_url"}], [{"text": "x"}], [1]]),
    (C, "messages.0.name", "str", []),
    (C, "tools", "array", [[1], [{"type": "x"}], [{"type": "function"}], [{"type": "function", "function": {}}]]),
    (C, "tool_choice", "str", ["sometimes", {"type": "function"}, {"type": "function", "function": {"name": "f"}}]),
    (C, "parallel_tool_calls", "bool", []),
    (C, "reasoning_format", "str", ["xml"]),
    (C, "chat_template_kwargs", "object", []),
    (C, "max_tokens", "int", [0, -1]),
    (C, "max_completion_tokens", "int", [0, -5]),
    (C, "temperature", "num", [-0.1, 2.5, 1e308]),
    (C, "top_p", "num", [0, 1.5, -1]),
    (C, "top_k", "int", []),  # <= 0 means off: not an error
    (C, "min_p", "num", [-0.5, 2]),
    (C, "presence_penalty", "num", [-3, 3]),
    (C, "frequency_penalty", "num", [-3, 3]),
    (C, "repetition_penalty", "num", [0, -1]),
    (C, "seed", "int", []),
    (C, "stop", "str", [["a", "b", "c", "d", "e"], [1]]),
    (C, "n", "int", [2, 0]),
    (C, "stream", "bool", []),
    (C, "response_format", "object", [{"type": "xml"}, {"type": "json_schema"}]),
    (C, "stream_options", "object", []),
    (C, "stream_options.include_usage", "bool", []),
    (C, "messages.0.tool_call_id", "str", []),
    (C, "messages.0.tool_calls", "array", [[1], [{"type": "function"}], [{"function": {"name": 1}}],
                                           [{"function": {"name": "f", "arguments": 5}}]]),
    (C, "tools.0", "object", [{"type": "function", "function": {"name": "f", "parameters": "x"}},
                              {"type": "function", "function": {"name": ""}},
                              {"type": "function", "function": {"name": "f", "description": 1}},
                              {"type": "function", "function": {"name": "x" * 300}}]),
    (C, "response_format", "object", [{"type": "json_schema", "json_schema": 1},
                                      {"type": "json_schema", "json_schema": {"name": "x", "schema": 1}},
                                      {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}]),
    (C, "logprobs", "bool", []),
    (C, "top_logprobs", "int", [21, -1]),
    (T, "model", "str", []),
    (T, "prompt", "str", [[], [-1], [[]], [1.5], [{"a": 1}], None]),
    (T, "max_tokens", "int", [0, -1]),
    (T, "temperature", "num", [3, -1]),
    (T, "top_p", "num", [0, 2]),
    (T, "top_k", "int", []),
    (T, "stop", "str", [["a", "b", "c", "d", "e"]]),
    (T, "stream", "bool", []),
    (T, "seed", "int", []),
    (T, "logprobs", "int", [-1, 21]),
    (T, "echo", "bool", [True]),
    (M, "model", "str", []),
    (M, "max_tokens", "int", [0, -1]),
    (M, "messages", "array", [[]]),
    (M, "messages.0", "object", []),
    (M, "messages.0.role", "str", ["system", "wizard"]),
    (M, "messages.0.content", "str", [[{"type": "nope"}], [1], [{"type": "text"}]]),
    (M, "system", "str", [[1], [{"type": "image"}]]),
    (M, "temperature", "num", [-1, 1.5]),
    (M, "top_p", "num", [-0.1, 1.5]),
    (M, "top_k", "int", [-2]),
    (M, "stop_sequences", "array", [[1], "stop"]),
    (M, "stream", "bool", []),
    (M, "tools", "array", [[1], [{}], [{"name": 1}]]),
    (M, "tool_choice", "object", [{"type": "sometimes"}, {"type": "tool"}]),
    (M, "thinking", "object", [{"type": "maybe"}, {"type": "enabled", "budget_tokens": -1},
                               {"type": "enabled", "budget_tokens": "x"}]),
    (M, "output_config", "object", [{"format": {"type": "json_schema"}}, {"format": {"type": "json_schema", "schema": 1}},
                                    {"format": {"type": "xml"}}]),
    (M, "messages.0.content", "str", [[{"type": "tool_result", "content": "x"}], [{"type": "image", "source": {}}],
                                      [{"type": "tool_use", "id": "t", "name": "f", "input": 1}]]),
    (M, "tool_choice", "object", [{"type": "tool", "name": "nope"}, {"type": "auto", "disable_parallel_tool_use": "x"}]),
    (N, "model", "str", []),
    (N, "messages", "array", [[]]),
    (N, "messages.0.role", "str", ["wizard"]),
    (N, "system", "str", [[1]]),
    (N, "tools", "array", [[1]]),
    ("/tokenize", "content", "str", []),
    ("/tokenize", "add_special", "bool", []),
    ("/tokenize", "with_pieces", "bool", []),
    ("/detokenize", "tokens", "array", [[-1], [1.5], ["a"], [10**12], [[1]]]),
]


# String fields that also take an array (of parts / of strings): [] is valid there.
STR_OR_ARRAY = {"messages.0.content", "stop", "system"}


def set_path(body, path, value):
    keys = path.split(".")
    node = body
    for k in keys[:-1]:
        if isinstance(node, dict) and k not in node:
            node[k] = [None] if keys[keys.index(k) + 1].isdigit() else {}
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


def battery():
    cases = []
    for ep in BASE:
        for name, raw in MALFORMED:
            cases.append(pytest.param(ep, raw, None, id=f"{ep}:{name}"))
    for ep, path, kind, extra in FIELDS:
        skip = {"array"} if path in STR_OR_ARRAY else set()
        values = [w for w in WRONG[kind] if w[0] not in skip] + [(f"range{i}", v) for i, v in enumerate(extra)]
        for label, value in values:
            body = json.loads(json.dumps(BASE[ep]))
            set_path(body, path, value)
            cases.append(pytest.param(ep, json.dumps(body).encode(), path, id=f"{ep}:{path}:{label}"))
    return cases


CASES = battery()


@pytest.fixture(scope="module")
def server(hearth_bin, default_model):
    s = Server(hearth_bin, default_model, "--request-timeout", REQUEST_TIMEOUT, "--max-connections", MAX_CONNECTIONS,
               "--max-header-bytes", MAX_HEADER, "--max-body-bytes", MAX_BODY, "--ctx", 512, "--max-seqs", 2)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def session():
    with requests.Session() as s:
        yield s


def check_error_shape(endpoint, r, field):
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    body = r.json()
    if endpoint in ANTHROPIC:
        assert body["type"] == "error", body
        err = body["error"]
        assert err["type"] == "invalid_request_error", body
    else:
        err = body["error"]
        assert err["type"] == "invalid_request_error", body
        assert "param" in err and "code" in err, body
    message = err["message"]
    assert isinstance(message, str) and message, body
    if field is not None:
        top = field.split(".")[0]
        param = err.get("param") or ""
        assert top in message or top in param, (field, body)
    return message


def test_battery_has_at_least_300_cases():
    assert len(CASES) >= 300, len(CASES)


@pytest.mark.parametrize("endpoint,raw,field", CASES)
def test_hostile_json(server, session, endpoint, raw, field):
    r = session.post(server.url + endpoint, data=raw, headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 400, (r.status_code, r.text[:300])
    message = check_error_shape(endpoint, r, field)
    if field is None:  # a body that is not a JSON object: the message says why and where
        assert any(w in message for w in ("byte ", "must be a JSON object", "is empty", "deeper than")), message


def test_malformed_json_names_the_byte_offset(server, session):
    r = session.post(server.url + "/v1/chat/completions", data=b'{"model":"\xff"}', timeout=30)
    assert r.status_code == 400
    assert "byte 11" in r.json()["error"]["message"] or "byte 12" in r.json()["error"]["message"], r.text
    r = session.post(server.url + "/v1/messages", data=b'{"model":"\\ud800"}', timeout=30)
    assert r.status_code == 400 and "byte" in r.json()["error"]["message"], r.text


def test_nul_is_content_and_duplicate_keys_last_wins(server, session):
    # "\u0000" is valid JSON: it stays in the content and is tokenized, not an error.
    r = session.post(server.url + "/tokenize", data=b'{"content":"a\\u0000b"}', timeout=30)
    assert r.status_code == 200, r.text
    with_nul = r.json()["tokens"]
    plain = session.post(server.url + "/tokenize", json={"content": "ab"}, timeout=30).json()["tokens"]
    assert with_nul != plain
    # Duplicate keys: the last one wins (documented in README).
    r = session.post(server.url + "/tokenize", data=b'{"content":"x","content":"hello world"}', timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == session.post(server.url + "/tokenize", json={"content": "hello world"},
                                              timeout=30).json()["tokens"]
    r = session.post(server.url + "/v1/chat/completions",
                     data=b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":"x","max_tokens":1}', timeout=60)
    assert r.status_code == 200, r.text


def test_server_still_serves_after_battery(server, session):
    r = session.post(server.url + "/v1/chat/completions", json=BASE[C], timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    r = session.post(server.url + "/v1/messages", json=BASE[M], timeout=60)
    assert r.status_code == 200, r.text


# ---------------------------------------------------------------------------
# Raw-socket tests of the HTTP limits.

def connect(server):
    s = socket.create_connection((server.host, server.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_response(sock, timeout=10.0):
    """(status, headers dict, body bytes) of one Connection: close / Content-Length response;
    status None when the server closed without answering."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        if b"\r\n\r\n" not in data:
            return None, {}, data
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
        n = int(headers.get("content-length", "-1"))
        while n >= 0 and len(body) < n:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return status, headers, body
    except (ConnectionResetError, BrokenPipeError):
        return None, {}, data


def raw_request(server, raw, timeout=10.0):
    with connect(server) as s:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return read_response(s, timeout)


def post_head(path, length=None, chunked=False, extra=""):
    h = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
    if length is not None:
        h += f"Content-Length: {length}\r\n"
    if chunked:
        h += "Transfer-Encoding: chunked\r\n"
    return (h + "\r\n").encode()


def served_quickly(server, limit=5.0):
    """A normal request from another client completes within `limit` seconds."""
    t0 = time.monotonic()
    r = requests.post(server.url + "/tokenize", json={"content": "hello"}, timeout=limit)
    return r.status_code == 200 and time.monotonic() - t0 < limit


def test_slowloris_header_trickle_is_dropped_and_others_served(server):
    socks = [connect(server) for _ in range(8)]
    stop = threading.Event()

    def trickle(s):
        try:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")
            while not stop.is_set():
                s.sendall(b"X")  # one header byte at a time, never a blank line
                time.sleep(0.2)
        except OSError:
            pass

    threads = [threading.Thread(target=trickle, args=(s,), daemon=True) for s in socks]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    try:
        assert served_quickly(server), "a normal client was starved by trickling ones"
        status, _, body = read_response(socks[0], timeout=REQUEST_TIMEOUT + 5)
        took = time.monotonic() - t0
        assert status == 408, (status, body)
        assert REQUEST_TIMEOUT - 0.5 <= took <= REQUEST_TIMEOUT + 5, took
        assert "--request-timeout" in json.loads(body)["error"]["message"]
    finally:
        stop.set()
        for s in socks:
            s.close()


def test_body_never_finished_is_dropped(server):
    with connect(server) as s:
        s.sendall(post_head("/v1/messages", length=1000) + b'{"model": "m"')
        assert served_quickly(server)
        t0 = time.monotonic()
        status, _, body = read_response(s, timeout=REQUEST_TIMEOUT + 5)
        assert status == 408, (status, body)
        assert time.monotonic() - t0 <= REQUEST_TIMEOUT + 3
        err = json.loads(body)
        assert err["type"] == "error" and "bytes arrived" in err["error"]["message"], err  # Anthropic shape


def test_oversize_header_is_431(server):
    raw = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(
        b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(12)) + b"\r\n"
    status, _, body = raw_request(server, raw)
    assert status == 431, (status, body)
    assert "--max-header-bytes" in json.loads(body)["error"]["message"]
    assert served_quickly(server)


def test_oversize_body_is_413_without_reading_it(server):
    with connect(server) as s:
        s.sendall(post_head("/v1/chat/completions", length=MAX_BODY + 1))
        status, _, body = read_response(s)  # answered before any body byte is sent
        assert status == 413, (status, body)
        assert json.loads(body)["error"]["code"] == "request_too_large"
    # Anthropic's shape on its routes.
    status, _, body = raw_request(server, post_head("/v1/messages", length=10**12))
    assert status == 413 and json.loads(body)["error"]["type"] == "request_too_large", body


def test_oversize_chunked_body_is_413(server):
    head = post_head("/v1/chat/completions", chunked=True)
    chunk = b"%x\r\n%s\r\n" % (64 * 1024, b" " * (64 * 1024))
    with connect(server) as s:
        s.sendall(head)
        status = None
        try:
            for _ in range(8):
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, _, body = read_response(s)
    assert status == 413, (status, body)
    # A single announced chunk larger than the limit is refused at its size line.
    status, _, body = raw_request(server, head + b"FFFFFFFFFF\r\n")
    assert status == 413, (status, body)


BAD_CHUNKED = [
    ("not_hex", b"zz\r\nhello\r\n0\r\n\r\n"),
    ("empty_size", b"\r\nhello\r\n0\r\n\r\n"),
    ("data_longer_than_size", b"2\r\nhello\r\n0\r\n\r\n"),
    ("missing_crlf_after_data", b"5\r\nhelloXX0\r\n\r\n"),
    ("bare_lf_after_size", b"5\nhello\r\n0\r\n\r\n"),
    ("size_too_many_digits", b"0000000000000000005\r\nhello\r\n0\r\n\r\n"),
    ("trailer", b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n"),
    ("negative_size", b"-5\r\nhello\r\n0\r\n\r\n"),
]


@pytest.mark.parametrize("name,body", BAD_CHUNKED, ids=[n for n, _ in BAD_CHUNKED])
def test_bad_chunked_encoding_is_400(server, name, body):
    status, _, resp = raw_request(server, post_head("/v1/chat/completions", chunked=True) + body)
    assert status == 400, (status, resp)
    assert "chunked" in json.loads(resp)["error"]["message"]


def test_truncated_chunked_body(server):
    # The client stops mid-chunk and waits: 408 at the deadline. Closing instead just ends it.
    with connect(server) as s:
        s.sendall(post_head("/v1/chat/completions", chunked=True) + b"10\r\nabc")
        status, _, _ = read_response(s, timeout=REQUEST_TIMEOUT + 5)
        assert status == 408
    with connect(server) as s:
        s.sendall(post_head("/v1/chat/completions", chunked=True) + b"10\r\nabc")
        s.shutdown(socket.SHUT_WR)
        status, _, _ = read_response(s)
        assert status in (None, 400)
    assert served_quickly(server)


def test_valid_chunked_body_is_served(server):
    body = json.dumps({"content": "hello world"}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:5], body[5:])) + b"0\r\n\r\n"
    status, _, resp = raw_request(server, post_head("/tokenize", chunked=True, extra="Connection: close\r\n") + chunks)
    assert status == 200, resp
    assert json.loads(resp)["tokens"]


def test_framing_errors(server):
    cases = [
        (post_head("/v1/chat/completions"), 411),                                  # no length
        (post_head("/v1/chat/completions", extra="Transfer-Encoding: gzip\r\n"), 501),
        (post_head("/v1/chat/completions", length=5, extra="Content-Length: 6\r\n"), 400),
        (post_head("/v1/chat/completions", extra="Content-Length: 12abc\r\n"), 400),
        (post_head("/v1/chat/completions", extra="Content-Length: -1\r\n"), 400),
    ]
    for raw, want in cases:
        status, _, body = raw_request(server, raw)
        assert status == want, (raw, status, body)
        json.loads(body)["error"]["message"]


def fill_connections_and_ask(server):
    """Holds MAX_CONNECTIONS + 4 idle connections and sends /health on one more: its answer."""
    held = []
    try:
        # Idle connections hold their places until the idle timeout; fill every place.
        for _ in range(MAX_CONNECTIONS + 4):
            held.append(connect(server))
        time.sleep(0.3)
        return raw_request(server, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    finally:
        for s in held:
            s.close()


def test_too_many_connections_get_503_and_others_recover(server):
    # A keep-alive connection left by an earlier test holds a place until its own idle
    # timeout; if that ends between the fill and the probe, the probe takes the freed
    # place. Such a place frees once, so a second fill is exact: a server without the
    # limit answers 200 every time.
    tries = []
    for _ in range(3):
        status, headers, body = fill_connections_and_ask(server)
        tries.append((status, body))
        if status == 503:
            break
        time.sleep(0.5)
    assert status == 503, tries
    assert headers.get("retry-after") == "1"
    assert "--max-connections" in json.loads(body)["error"]["message"]
    deadline = time.monotonic() + 5
    while True:
        try:
            if served_quickly(server):
                break
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, "the server did not recover after the connections closed"
        time.sleep(0.1)


def test_listen_queue_takes_a_burst_of_connections(server):
    # cpp-httplib listens with a backlog of 5: 64 benchmark streams connecting at once lost a
    # third of their connections to the kernel's full accept queue. The server widens it.
    port = server.port
    try:
        out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, timeout=10).stdout
    except (FileNotFoundError, subprocess.TimeoutExpired):
        out = ""
    if out.strip():
        backlog = int(out.split()[2])  # Send-Q of a listening socket: its backlog
        assert backlog >= 128, out
    # And a burst: clients connecting in the same instant are all answered.
    n = MAX_CONNECTIONS - 4
    results = [None] * n
    barrier = threading.Barrier(n)

    def client(i):
        barrier.wait()
        try:
            status, _, _ = raw_request(server, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            results[i] = status
        except OSError as e:
            results[i] = repr(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [200] * n, results


# ---------------------------------------------------------------------------
# Hostile chat templates inside a GGUF: the sandbox's limits stop them with a clear
# error, quickly, and the server goes on serving. One converted tiny model carries a
# template that turns hostile depending on the user's message.

HOSTILE_TEMPLATE = (
    "{%- macro deep(n) -%}{{ deep(n + 1) }}{%- endmacro -%}"
    "{%- set m = messages[-1]['content'] -%}"
    "{%- if m == 'loop' -%}{%- for i in range(999999) -%}{%- for j in range(999999) -%}x{%- endfor -%}{%- endfor -%}"
    "{%- elif m == 'range' -%}{%- for i in range(10 ** 12) -%}x{%- endfor -%}"
    "{%- elif m == 'recurse' -%}{{ deep(0) }}"
    "{%- elif m == 'huge' -%}{{ 'x' * (10 ** 9) }}"
    "{%- elif m == 'double' -%}{%- set ns = namespace(s='ab') -%}"
    "{%- for i in range(64) -%}{%- set ns.s = ns.s ~ ns.s -%}{%- endfor -%}{{ ns.s }}"
    "{%- elif m == 'raise' -%}{{ raise_exception('this template refuses the conversation') }}"
    "{%- else -%}{%- for x in messages -%}<|im_start|>{{ x['role'] }}\n{{ x['content'] }}<|im_end|>\n{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|im_start|>assistant\n{%- endif -%}{%- endif -%}"
)


@pytest.fixture(scope="module")
def hostile_template_server(hearth_bin, shared_dir, tmp_path_factory):
    import subprocess
    import sys
    repo = __import__("pathlib").Path(__file__).resolve().parents[2]
    hf = tmp_path_factory.mktemp("hostile_tpl") / "hf"
    subprocess.run([sys.executable, str(repo / "benchmarks/make_qwen35_model.py"), str(hf),
                    "--shared", str(shared_dir / "data"), "--hidden", "64", "--layers", "4",
                    "--intermediate", "128", "--heads", "2", "--kv-heads", "1", "--head-dim", "32",
                    "--linear-key-heads", "2", "--linear-key-dim", "16", "--linear-value-dim", "16",
                    "--dtype", "f32", "--std", "0.5", "--seed", "3"], check=True, capture_output=True, text=True, timeout=300)
    cfg_path = hf / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = HOSTILE_TEMPLATE
    cfg_path.write_text(json.dumps(cfg))
    gguf = hf.parent / "hostile.gguf"
    p = subprocess.run([str(hearth_bin), "convert", str(hf), "-o", str(gguf), "--type", "f32"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    s = Server(hearth_bin, gguf, "--ctx", 256, "--max-seqs", 2)
    yield s
    s.stop()


def cpu_seconds(pid):
    """User + system CPU seconds of a process so far (Linux /proc)."""
    import os
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("trigger,expect", [
    ("loop", "limit"), ("range", "limit"), ("recurse", "depth"), ("huge", "limit"), ("double", "limit"),
    ("raise", "refuses the conversation"),
])
def test_hostile_template_in_gguf_is_stopped(hostile_template_server, trigger, expect):
    url = hostile_template_server.url
    cpu0 = cpu_seconds(hostile_template_server.proc.pid)
    r = requests.post(url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": trigger}], "max_tokens": 1}, timeout=120)
    took = cpu_seconds(hostile_template_server.proc.pid) - cpu0
    assert r.status_code == 400, r.text
    msg = r.json()["error"]["message"]
    assert "chat template" in msg and expect in msg, msg
    # CPU time, not wall time: the test machine may be shared and loaded.
    assert took < 10, f"the sandbox took {took:.1f} CPU-s to stop '{trigger}'"
    # Anthropic route: the same template, Anthropic's error shape.
    r = requests.post(url + "/v1/messages", json={"model": "m", "max_tokens": 1,
                                                  "messages": [{"role": "user", "content": trigger}]}, timeout=120)
    assert r.status_code == 400 and r.json()["type"] == "error", r.text
    # The server still serves a conversation the template handles.
    r = requests.post(url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hello"}], "max_tokens": 1}, timeout=60)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("endpoint,field", [(C, "temperature"), (C, "max_tokens"), (T, "top_p"), (M, "temperature"),
                                            (M, "max_tokens"), ("/detokenize", "tokens")])
@pytest.mark.parametrize("number", [b"1e400", b"-1e400", b"1" + b"0" * 400, b"1e-400"])
def test_numbers_beyond_double(server, session, endpoint, field, number):
    # JSON has no limit on a number's size; a value that does not fit a double (or an
    # integer field's 64 bits) must be a 400 naming the field, never inf reaching a sampler.
    body = json.loads(json.dumps(BASE[endpoint]))
    body[field] = "@@"
    raw = json.dumps(body).replace('"@@"', "[@@]" if field == "tokens" else "@@").encode().replace(b"@@", number)
    r = session.post(server.url + endpoint, data=raw, timeout=30)
    if number == b"1e-400" and field in ("temperature", "top_p"):
        # Underflows to 0: a valid temperature (greedy); top_p must be > 0.
        assert r.status_code == (400 if field == "top_p" else 200), r.text
        return
    assert r.status_code == 400, (r.status_code, r.text[:300])
    check_error_shape(endpoint, r, field)


def test_pipelined_requests_are_framed_apart(server):
    body = json.dumps({"content": "hi"}).encode()
    raw = (post_head("/tokenize", length=len(body)) + body + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" +
           post_head("/tokenize", length=len(body), extra="Connection: close\r\n") + body)
    with connect(server) as s:
        s.sendall(raw)
        s.settimeout(10)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data.count(b"HTTP/1.1 200") == 3, data[:500]
    assert data.count(b'"tokens"') == 2 and b'"status":"ok"' in data
