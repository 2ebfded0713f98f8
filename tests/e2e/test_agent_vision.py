"""`hearth agent` with images, end to end on real models and servers.

The agent finds out whether the model takes images (a /tokenize probe with a small PNG) and
offers view_image only then. The tiny random Qwen3.5 with a vision tower answers noise, so it
cannot be made to name a file; the tool call is made by the default model (SmolLM2-135M, text
only, which copies a plain path faithfully under --tool-choice) with --vision on: the tool reads
the screenshot, the tool message carries it as an image_url part, the text-only server refuses it
naming that part, and the agent turns the refusal into a tool error and goes on. That transcript,
resumed against the vision model, sends the tool result's image to a server that counts it: the
prompt tokens grow by exactly the image's tokens (the tiny model's processor: 16-pixel patches
merged 2x2). An image attached with --image reaches the vision model the same way."""
import base64
import json
import os
import re
import subprocess

import pytest

from test_agent import STATUS_RE, agent_args, transcript
from vision_util import make_tiny_vision_model, png_bytes

SHORT = "/tmp/hagentimg"  # a short fixed path the small model copies as given (see test_agent.short_dir)


@pytest.fixture(scope="module")
def tiny_vision(tmp_path_factory, shared_dir):
    return make_tiny_vision_model(tmp_path_factory.mktemp("tinyv") / "hf", shared_dir)


@pytest.fixture
def short_dir(tmp_path):
    if os.path.lexists(SHORT):
        os.unlink(SHORT)
    os.symlink(tmp_path, SHORT)
    yield SHORT
    os.unlink(SHORT)


def run_agent(hearth_bin, model, tmp_path, *extra, log="logs", timeout=180):
    args = agent_args(hearth_bin, model, tmp_path, *extra)
    args[args.index("--log-dir") + 1] = str(tmp_path / log)
    return subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def prompt_tokens(stdout, step=1):
    """The server's prompt tokens of a step: the status line's context minus its completion tokens."""
    for m in STATUS_RE.finditer(stdout):
        if int(m.group(1)) == step:
            return int(m.group(3)) - int(m.group(6))
    raise AssertionError(f"no status line for step {step}:\n{stdout}")


def data_url(data):
    return "data:image/png;base64," + base64.b64encode(data).decode()


def test_view_image_tool_result_carries_the_screenshot(hearth_bin, default_model, tiny_vision, tmp_path, short_dir):
    shot = png_bytes(256, 192)  # 16x12 patches -> 8x6 = 48 image tokens for the vision model
    (tmp_path / "shot.png").write_bytes(shot)
    target = f"{short_dir}/shot.png"

    # 1. Text-only server, view_image offered anyway (--vision on) and forced.
    p = run_agent(hearth_bin, default_model, tmp_path, "-p", f"Look at the image {target}", "--vision", "on",
                  "--tool-choice", "view_image", "--max-steps", "2", "--max-tokens", "40")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "takes images (view_image)" in p.stderr
    path, msgs = transcript(tmp_path)
    call = msgs[2]["tool_calls"][0]
    assert call["function"]["name"] == "view_image"
    assert json.loads(call["function"]["arguments"]) == {"path": target}
    tool = msgs[3]
    assert tool["role"] == "tool" and tool["tool_call_id"] == call["id"] and tool["name"] == "view_image"
    assert tool["content"] == [{"type": "text", "text": f"image {target} (image/png, {len(shot)} bytes) attached"},
                               {"type": "image_url", "image_url": {"url": data_url(shot)}}]
    # The server saw the image in the tool message (messages[3] with the system prompt first).
    assert re.search(r"\[request failed: HTTP 400: model '[^']+' takes text only \(no vision encoder\): "
                     r"messages\[3\]\.content\[1\] is an image\]", p.stdout), p.stdout
    assert "[the model takes text only (no vision encoder): images replaced by a note; retrying]" in p.stdout
    assert STATUS_RE.search(p.stdout.split("retrying]")[1]), p.stdout  # step 2 was answered
    # Without --vision the probe finds out: the tool is not offered and cannot be forced.
    p2 = run_agent(hearth_bin, default_model, tmp_path, "-p", "hi", "--tool-choice", "view_image", log="logs-t")
    assert p2.returncode == 2 and "--tool-choice view_image: the model does not take images" in p2.stderr, p2.stderr
    p2 = run_agent(hearth_bin, default_model, tmp_path, "-p", "hi", "--image", tmp_path / "shot.png", log="logs-t")
    assert p2.returncode == 2 and "takes text only (no vision encoder)" in p2.stderr, p2.stderr

    # 2. The same conversation resumed against the vision model: the tool result's image is
    # counted. Against it, a copy whose image is a 64x64 PNG (the processor's minimum: 4 tokens).
    small = tmp_path / "small.jsonl"
    small.write_text(path.read_text().replace(data_url(shot), data_url(png_bytes(64, 64))))
    assert small.read_text() != path.read_text()
    counts = []
    for i, t in enumerate((path, small)):
        r = run_agent(hearth_bin, tiny_vision, tmp_path, "--resume", t, "-p", "And now?", "--max-tokens", "1",
                      "--max-steps", "1", log=f"logs-v{i}")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "takes images (view_image)" in r.stderr and "request failed" not in r.stdout, r.stdout
        counts.append(prompt_tokens(r.stdout))
    assert counts[0] - counts[1] == 48 - 4, counts


def test_attached_image_reaches_the_vision_model(hearth_bin, tiny_vision, tmp_path):
    (tmp_path / "big.png").write_bytes(png_bytes(256, 256))  # 8x8 = 64 tokens
    (tmp_path / "small.png").write_bytes(png_bytes(64, 64))  # 2x2 = 4 tokens
    counts = {}
    for name in ("big.png", "small.png"):
        p = run_agent(hearth_bin, tiny_vision, tmp_path, "-p", "What is in this picture?", "--image", name,
                      "--max-tokens", "1", "--max-steps", "1", log=f"logs-{name}")
        assert p.returncode == 0, p.stdout + p.stderr
        assert f"[image] {name} (image/png, {len((tmp_path / name).read_bytes())} bytes)" in p.stdout
        counts[name] = prompt_tokens(p.stdout)
        files = sorted((tmp_path / f"logs-{name}").glob("agent-*.jsonl"))
        user = json.loads(files[-1].read_text().splitlines()[1])
        assert user == {"role": "user", "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": data_url((tmp_path / name).read_bytes())}}]}
    assert counts["big.png"] - counts["small.png"] == 64 - 4, counts


def test_bad_images_are_refused_before_anything_starts(hearth_bin, tmp_path):
    (tmp_path / "notes.png").write_text("%PDF-1.7 not a picture")

    def run(*args):
        return subprocess.run([str(hearth_bin), "agent", "--log-dir", str(tmp_path / "logs"), *map(str, args)],
                              capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, cwd=tmp_path)

    p = run("--image", "notes.png", "-p", "x")
    assert p.returncode == 2 and ("--image: 'notes.png' is not a PNG, JPEG, WebP or GIF image "
                                  "(it starts with 25 50 44 46 2d 31 2e 37)") in p.stderr, p.stderr
    p = run("--image", "missing.png", "-p", "x")
    assert p.returncode == 2 and "--image: 'missing.png' does not exist" in p.stderr, p.stderr
    p = run("--vision", "off", "--image", "notes.png", "-p", "x")
    assert p.returncode == 2 and "--image needs a model that takes images" in p.stderr, p.stderr
    p = run("--vision", "maybe", "--no-server")
    assert p.returncode == 2 and "--vision must be auto, on or off; got 'maybe'" in p.stderr, p.stderr


def test_image_command_attaches_to_the_next_typed_message(hearth_bin, tiny_vision, tmp_path):
    (tmp_path / "shot.png").write_bytes(png_bytes(64, 64))
    (tmp_path / "notes.txt").write_text("text")
    args = agent_args(hearth_bin, tiny_vision, tmp_path, "--max-tokens", "1", "--max-steps", "1")
    p = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=180,
                       input="/image notes.txt\n/image shot.png\nWhat is it?\nAnd this?\nquit\n")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[/image: 'notes.txt' is not a PNG, JPEG, WebP or GIF image (it starts with 74 65 78 74)]" in p.stdout
    assert "[image shot.png (image/png, " in p.stdout
    _, msgs = transcript(tmp_path)
    users = [m for m in msgs if m["role"] == "user"]
    assert users[0]["content"] == [{"type": "text", "text": "What is it?"},
                                   {"type": "image_url", "image_url": {"url": data_url(png_bytes(64, 64))}}]
    assert users[1]["content"] == "And this?"  # the image went with one message only
