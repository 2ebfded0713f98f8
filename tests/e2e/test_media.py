"""Images in requests to `hearth serve` end to end, on the default model (SmolLM2, text only):
a valid PNG sent through the official `openai` SDK (chat and Responses) and `anthropic` SDK is a
400 saying the model takes text only and naming the content part, streamed or not, also for
count_tokens and /tokenize; the image references are resolved first, so each kind of bad
reference has its own 400: a malformed data: URL (the offset named), a file:// path outside
--allowed-media-dir (or a symlink out of it), a missing file inside it, an http URL without
--allow-remote-media, and with it (against a local http.server started here) a file above
--max-media-bytes (with and without Content-Length), a slow one (--media-timeout-ms), an HTTP
error, a redirect to another scheme; more images than --max-images-per-request. After all of
them the server still answers a text request."""
import base64
import http.server
import os
import struct
import threading
import time
import zlib

import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from serve_util import Server, http_get, http_post  # noqa: E402

HTTP_TIMEOUT = 60
MAX_BYTES = 4096
TIMEOUT_MS = 1500
MAX_IMAGES = 3


def png(width=2, height=2):
    """A valid RGB PNG of a few bytes (zlib + struct)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + bytes([200, 30, 30]) * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


PNG = png()
PNG_B64 = base64.b64encode(PNG).decode()
DATA_URL = "data:image/png;base64," + PNG_B64


class MediaHandler(http.server.BaseHTTPRequestHandler):
    """/img.png: the PNG; /big.png: MAX_BYTES + 1000 bytes (Content-Length given); /big-stream.png:
    as many without a Content-Length (the limit must hold while downloading); /slow.png: the
    PNG after 5 s; /to-ftp: a redirect to ftp://; /to-img: a redirect to /img.png; /loop: a
    redirect to itself; else 404."""
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        if self.path == "/img.png":
            self._send(200, PNG)
        elif self.path == "/big.png":
            self._send(200, PNG + b"\0" * (MAX_BYTES + 1000))
        elif self.path == "/big-stream.png":
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            try:
                for _ in range(10):
                    self.wfile.write(b"\0" * 1000)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif self.path == "/slow.png":
            time.sleep(5)
            try:
                self._send(200, PNG)
            except (BrokenPipeError, ConnectionResetError):
                pass
        elif self.path in ("/to-ftp", "/to-img", "/loop"):
            self.send_response(302)
            self.send_header("Location", {"/to-ftp": "ftp://127.0.0.1/x.png", "/to-img": "/img.png"}.get(self.path, "/loop"))
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._send(404, b"no such image")

    def _send(self, status, body):
        self.send_response(status)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def media_http():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MediaHandler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.fixture(scope="module")
def media_dir(tmp_path_factory):
    """allowed/{img.png, escape -> ../outside/secret.png}, outside/secret.png."""
    root = tmp_path_factory.mktemp("media")
    (root / "allowed").mkdir()
    (root / "outside").mkdir()
    (root / "allowed" / "img.png").write_bytes(PNG)
    (root / "outside" / "secret.png").write_bytes(PNG)
    os.symlink("../outside/secret.png", root / "allowed" / "escape")
    return root


@pytest.fixture(scope="module")
def server(hearth_bin, default_model, media_dir):
    srv = Server(hearth_bin, default_model, "--ctx", 2048, "--threads", "2",
                 "--allowed-media-dir", media_dir / "allowed", "--allow-remote-media",
                 "--max-media-bytes", MAX_BYTES, "--media-timeout-ms", TIMEOUT_MS,
                 "--max-images-per-request", MAX_IMAGES)
    yield srv
    rc, _ = srv.stop(timeout=8)
    assert rc == 0, srv.stderr()[-3000:]


@pytest.fixture(scope="module")
def model_id(server):
    return http_get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]


@pytest.fixture(scope="module")
def oai(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=HTTP_TIMEOUT)
    yield c
    c.close()


@pytest.fixture(scope="module")
def claude(server):
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=HTTP_TIMEOUT)
    yield c
    c.close()


def text_only(model_id, where):
    return f"model '{model_id}' takes text only (no vision encoder): {where} is an image"


def image_message(url, text="What is in this image?"):
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


def chat_error(server, messages, **extra):
    """POST /v1/chat/completions; asserts a 400 and returns the error object."""
    r = http_post(server.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 4, **extra},
                  timeout=HTTP_TIMEOUT)
    assert r.status_code == 400, r.text
    return r.json()["error"]


def test_openai_sdk_image_is_text_only_400(oai, model_id):
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as e:
            oai.chat.completions.create(model=model_id, messages=image_message(DATA_URL), max_tokens=4, stream=stream)
        assert e.value.status_code == 400
        assert e.value.body["message"] == text_only(model_id, "messages[0].content[1]"), e.value.body
        assert e.value.body["param"] == "messages[0].content[1]"
    # The string form of image_url some clients send, in a later message.
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=model_id, max_tokens=4, messages=[
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": [{"type": "image_url", "image_url": DATA_URL}]}])
    assert e.value.body["message"] == text_only(model_id, "messages[2].content[0]")


def test_anthropic_sdk_image_is_text_only_400(claude, model_id):
    content = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
               {"type": "text", "text": "Describe it."}]
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=model_id, max_tokens=4, messages=[{"role": "user", "content": content}])
    assert e.value.status_code == 400
    assert e.value.body["error"]["message"] == text_only(model_id, "messages[0].content[0]"), e.value.body
    with pytest.raises(anthropic.BadRequestError) as e:
        with claude.messages.stream(model=model_id, max_tokens=4, messages=[{"role": "user", "content": content}]) as s:
            for _ in s:
                pass
    assert e.value.body["error"]["message"] == text_only(model_id, "messages[0].content[0]")
    # count_tokens answers too (no crash), with the same 400.
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.count_tokens(model=model_id, messages=[{"role": "user", "content": content}])
    assert e.value.body["error"]["message"] == text_only(model_id, "messages[0].content[0]")
    # An image in a tool result, after the tool call.
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=model_id, max_tokens=4, messages=[
            {"role": "user", "content": "take a screenshot"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": content}]}],
            tools=[{"name": "shot", "description": "screenshot", "input_schema": {"type": "object"}}])
    assert e.value.body["error"]["message"] == text_only(model_id, "messages[2].content[0].content[0]")
    # Bad base64 is named with its offset.
    bad = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64[:8] + "!" + PNG_B64[9:]}}]
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=model_id, max_tokens=4, messages=[{"role": "user", "content": bad}])
    assert "messages[0].content[0].source.data" in e.value.body["error"]["message"]
    assert "byte 8 is '!'" in e.value.body["error"]["message"]


def test_responses_image_is_text_only_400(oai, model_id):
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as e:
            oai.responses.create(model=model_id, max_output_tokens=16, stream=stream, input=[
                {"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                             {"type": "input_image", "image_url": DATA_URL, "detail": "auto"}]}])
        assert e.value.status_code == 400
        assert e.value.body["message"] == text_only(model_id, "input[0].content[1]"), e.value.body


def test_tokenize_with_an_image(server, model_id):
    r = http_post(server.url + "/tokenize", json={"messages": image_message(DATA_URL)}, timeout=HTTP_TIMEOUT)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == text_only(model_id, "messages[0].content[1]")


def test_malformed_data_urls(server):
    e = chat_error(server, image_message("data:image/png;base64," + PNG_B64[:12] + "*" + PNG_B64[13:]))
    assert e["param"] == "messages[0].content[1].image_url"
    assert e["message"].startswith("messages[0].content[1].image_url: invalid base64"), e
    assert "byte 12 is '*'" in e["message"]
    e = chat_error(server, image_message("data:image/png;base64," + PNG_B64[:-2]))
    assert "not a multiple of 4" in e["message"], e
    e = chat_error(server, image_message("data:image/png," + PNG_B64))
    assert "not base64" in e["message"], e
    e = chat_error(server, image_message("data:text/html;base64," + PNG_B64))
    assert "'text/html' is not an image type" in e["message"], e


def test_file_urls(server, media_dir, model_id):
    allowed = media_dir / "allowed"
    e = chat_error(server, image_message(f"file://{media_dir}/outside/secret.png"))
    assert e["message"].startswith("messages[0].content[1].image_url: "), e
    assert "outside the allowed media directories" in e["message"]
    e = chat_error(server, image_message(f"file://{allowed}/../outside/secret.png"))
    assert "outside the allowed media directories" in e["message"], e
    e = chat_error(server, image_message(f"file://{allowed}/escape"))
    assert "through a symbolic link" in e["message"], e
    # Inside the directory: a missing file is named, a present one is read (then refused
    # for the text-only model).
    e = chat_error(server, image_message(f"file://{allowed}/missing.png"))
    assert e["message"] == f"messages[0].content[1].image_url: not found: {allowed}/missing.png", e
    e = chat_error(server, image_message(f"file://{allowed}/img.png"))
    assert e["message"] == text_only(model_id, "messages[0].content[1]"), e


def test_remote_urls(server, media_http, model_id):
    e = chat_error(server, image_message(media_http + "/img.png"))
    assert e["message"] == text_only(model_id, "messages[0].content[1]"), e
    e = chat_error(server, image_message(media_http + "/to-img"))  # one redirect is followed
    assert e["message"] == text_only(model_id, "messages[0].content[1]"), e
    for path in ("/big.png", "/big-stream.png"):
        e = chat_error(server, image_message(media_http + path))
        assert f"larger than {MAX_BYTES} bytes" in e["message"], e
    t0 = time.monotonic()
    e = chat_error(server, image_message(media_http + "/slow.png"))
    assert f"timed out after {TIMEOUT_MS} ms" in e["message"], e
    assert time.monotonic() - t0 < 4.5  # the server gave up at its limit, not when the file came
    e = chat_error(server, image_message(media_http + "/nothing.png"))
    assert "answered HTTP 404" in e["message"], e
    e = chat_error(server, image_message(media_http + "/to-ftp"))
    assert e["param"] == "messages[0].content[1].image_url"
    assert "redirects to a scheme other than http or https" in e["message"], e
    e = chat_error(server, image_message(media_http + "/loop"))
    assert "redirects more than 3 times" in e["message"], e


def test_remote_urls_need_the_flag(hearth_bin, default_model, media_http):
    srv = Server(hearth_bin, default_model, "--ctx", 512, "--threads", "2")
    try:
        e = chat_error(srv, image_message(media_http + "/img.png"))
        assert e["message"] == ("messages[0].content[1].image_url: remote images are refused: the server was not "
                                "started with --allow-remote-media"), e
        e = chat_error(srv, image_message("file:///etc/hostname"))
        assert "--allowed-media-dir" in e["message"], e
    finally:
        rc, _ = srv.stop(timeout=8)
    assert rc == 0


def test_too_many_images(server, model_id):
    parts = [{"type": "image_url", "image_url": {"url": DATA_URL}}] * (MAX_IMAGES + 1)
    e = chat_error(server, [{"role": "user", "content": parts}])
    assert e["message"] == (f"the request holds {MAX_IMAGES + 1} images, more than the {MAX_IMAGES} allowed per "
                            "request (--max-images-per-request)"), e
    e = chat_error(server, [{"role": "user", "content": parts[:MAX_IMAGES]}])
    assert e["message"] == text_only(model_id, "messages[0].content[0]"), e


def test_images_where_none_belong(server):
    e = chat_error(server, [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": DATA_URL}}]},
                            {"role": "user", "content": "hi"}])
    assert e["param"] == "messages[0].content[0].type"
    assert "images are allowed in user and tool messages only" in e["message"], e


def test_text_still_works_after_the_bad_requests(oai, server, model_id):
    # (pytest runs this module's tests in order: this one comes after every refusal above.)
    r = oai.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Say hi."}],
                                    max_tokens=8, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens >= 1
    assert http_get(server.url + "/health", timeout=10).status_code == 200
    assert server.proc.poll() is None
