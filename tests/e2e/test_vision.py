"""Images end to end (issue 37) on a tiny random Qwen3.5 with a vision tower (written by
benchmarks/make_qwen35_model.py --vision-depth 2, numpy only; the real Qwen3 tokenizer and the
Qwen3.5 chat template): `hearth run --image` from the HF folder and from the converted GGUF with
its mmproj file beside it give the same tokens; `hearth serve` answers an OpenAI image_url part,
an Anthropic base64 image block and a Responses input_image with the tokens `run --image` gives
for the same conversation; image tokens count in usage and count_tokens; the same image in a
later turn hits the prefix cache and another image does not; image requests batch with text
requests (each answer equals its solo answer); a corrupt image is a 400 naming its part and
harms nothing. The model's weights are random: only the mechanics are checked (the numbers
against transformers are tests/unit/model_vision_test.cpp)."""
import base64
import concurrent.futures
import json
import pathlib
import subprocess

import anthropic
import pytest
import requests
from openai import OpenAI

from serve_util import Server
from vision_util import make_tiny_vision_model

REPO = pathlib.Path(__file__).resolve().parents[2]
IMG_A = REPO / "tests/data/qwen35/vision_moe_images/a.png"     # 96 x 64: 6 tokens
IMG_B = REPO / "tests/data/qwen35/vision_moe_images/b.png"     # 90 x 150 -> 96 x 160: 15 tokens
IMG_JPG = REPO / "tests/data/vision/baseline_64x48.jpg"
QUESTION = "What is in this picture?"


@pytest.fixture(scope="module")
def vision_folder(tmp_path_factory, shared_dir):
    return make_tiny_vision_model(tmp_path_factory.mktemp("qwen35v") / "hf", shared_dir)


@pytest.fixture(scope="module")
def vision_gguf(vision_folder, hearth_bin):
    out = vision_folder.parent / "gguf" / "tiny-vision.f32.gguf"
    out.parent.mkdir()
    p = subprocess.run([str(hearth_bin), "convert", str(vision_folder), "-o", str(out), "--type", "f32"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert (out.parent / "mmproj-tiny-vision.f32.gguf").is_file(), p.stdout
    return out


def run_json(hearth_bin, model, images, prompt=QUESTION, n=10, extra=()):
    args = [str(hearth_bin), "run", "-m", str(model), "-p", prompt, "-n", str(n), "--json", "--threads", "2"]
    for i in images:
        args += ["--image", str(i)]
    p = subprocess.run(args + list(extra), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), p.stderr


def data_url(path, mime="image/png"):
    return f"data:{mime};base64," + base64.b64encode(pathlib.Path(path).read_bytes()).decode()


def test_run_image_from_folder_equals_converted_gguf_with_mmproj(hearth_bin, vision_folder, vision_gguf):
    a, err = run_json(hearth_bin, vision_folder, [IMG_A])
    b, err_b = run_json(hearth_bin, vision_gguf, [IMG_A])
    assert "Images: 1, 6 tokens" in err and "Images: 1, 6 tokens" in err_b
    assert a["tokens"] == b["tokens"] and len(a["tokens"]) > 0
    # The image's 6 rows are in the prompt: one more image of 15 rows adds 15 + 2 markers.
    two, err2 = run_json(hearth_bin, vision_folder, [IMG_A, IMG_B])
    assert "Images: 2, 21 tokens" in err2
    assert two["prompt_tokens"] == a["prompt_tokens"] + 15 + 2
    text, _ = run_json(hearth_bin, vision_folder, [])
    assert text["prompt_tokens"] == a["prompt_tokens"] - 6 - 2
    # The image changes the model's output distribution (the rows carry the image, not the
    # placeholder's embedding); this random model's greedy text may still be the same.
    la, _ = run_json(hearth_bin, vision_folder, [IMG_A], n=2, extra=["--logprobs", "2"])
    lb, _ = run_json(hearth_bin, vision_folder, [IMG_B], n=2, extra=["--logprobs", "2"])
    assert abs(la["logprobs"][0]["logprob"] - lb["logprobs"][0]["logprob"]) > 1e-3


def test_run_refuses_images_for_a_text_model_and_bad_files(hearth_bin, default_model, vision_folder, tmp_path):
    p = subprocess.run([str(hearth_bin), "run", "-m", str(default_model), "--image", str(IMG_A), "-p", "hi", "-n", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "takes text only" in p.stderr
    bad = tmp_path / "broken.png"
    bad.write_bytes(IMG_A.read_bytes()[:100])
    p = subprocess.run([str(hearth_bin), "run", "-m", str(vision_folder), "--image", str(bad), "-p", "hi", "-n", "2"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and str(bad) in p.stderr and "PNG" in p.stderr


@pytest.fixture(scope="module")
def vision_server(hearth_bin, vision_gguf):
    s = Server(hearth_bin, vision_gguf, "--threads", "2", "--max-seqs", "4", "--ctx", "4096", "--model-id", "tiny-v")
    yield s
    s.stop()


def openai_image_chat(client, image_url, question=QUESTION, max_tokens=10, history=()):
    content = [{"type": "image_url", "image_url": {"url": image_url}}, {"type": "text", "text": question}]
    return client.chat.completions.create(model="tiny-v", max_tokens=max_tokens, temperature=0,
                                          messages=[*history, {"role": "user", "content": content}],
                                          extra_body={"chat_template_kwargs": {"enable_thinking": True}})


def test_models_list_says_the_model_takes_images(vision_server, hearth_bin, default_model):
    m = requests.get(vision_server.url + "/v1/models", timeout=10).json()["data"][0]
    assert m["capabilities"] == ["completion", "vision"]
    s = Server(hearth_bin, default_model, "--threads", "1")
    try:
        assert requests.get(s.url + "/v1/models", timeout=10).json()["data"][0]["capabilities"] == ["completion"]
    finally:
        s.stop()


def test_serve_openai_image_equals_run_image(hearth_bin, vision_gguf, vision_server):
    client = OpenAI(base_url=vision_server.url + "/v1", api_key="x")
    r = openai_image_chat(client, data_url(IMG_A))
    ref, _ = run_json(hearth_bin, vision_gguf, [IMG_A])
    assert r.usage.prompt_tokens == ref["prompt_tokens"]
    got = (r.choices[0].message.content or "") + (getattr(r.choices[0].message, "reasoning_content", None) or "")
    assert r.usage.completion_tokens == len(ref["tokens"])
    # Same prompt, same greedy tokens: the served text is the one-shot text (the server may
    # split it into reasoning and content).
    # (Stray bytes of a character cut between the two parts decode to U+FFFD on each side.)
    norm = lambda t: t.replace("<think>", "").replace("</think>", "").replace("\ufffd", "").replace("\n", "").strip()
    assert norm(got) == norm(ref["text"])


def test_serve_anthropic_and_responses_images_agree_with_openai(vision_server):
    client = OpenAI(base_url=vision_server.url + "/v1", api_key="x")
    ref = openai_image_chat(client, data_url(IMG_B))
    ac = anthropic.Anthropic(base_url=vision_server.url, api_key="x")
    b64 = base64.b64encode(IMG_B.read_bytes()).decode()
    m = ac.messages.create(model="tiny-v", max_tokens=10, thinking={"type": "enabled", "budget_tokens": 1024},
                           messages=[{"role": "user", "content": [
                               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
                               {"type": "text", "text": QUESTION}]}],
                           extra_body={"temperature": 0})
    # (Anthropic's input_tokens leave out what was read from the cache: the same image and
    # question came just before through the OpenAI route.)
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == ref.usage.prompt_tokens
    assert m.usage.cache_read_input_tokens >= 16
    assert m.usage.output_tokens == ref.usage.completion_tokens
    count = ac.messages.count_tokens(model="tiny-v", thinking={"type": "enabled", "budget_tokens": 1024},
                                     messages=[{"role": "user", "content": [
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": b64}},
                                         {"type": "text", "text": QUESTION}]}])
    assert count.input_tokens == ref.usage.prompt_tokens
    resp = client.responses.create(model="tiny-v", max_output_tokens=10, temperature=0,
                                   input=[{"role": "user", "content": [
                                       {"type": "input_image", "image_url": data_url(IMG_B)},
                                       {"type": "input_text", "text": QUESTION}]}])
    assert resp.usage.input_tokens == ref.usage.prompt_tokens


def test_same_image_in_a_later_turn_hits_the_prefix_cache(vision_server):
    client = OpenAI(base_url=vision_server.url + "/v1", api_key="x")
    first = openai_image_chat(client, data_url(IMG_B), question="Describe the colours in detail please.")
    history = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(IMG_B)}},
                                            {"type": "text", "text": "Describe the colours in detail please."}]},
               {"role": "assistant", "content": first.choices[0].message.content or "ok"}]
    follow = openai_image_chat(client, data_url(IMG_A), question="And this one?", history=history)
    cached = follow.usage.prompt_tokens_details.cached_tokens
    # The first turn (its image's 15 rows included) is reused: at least the whole blocks before
    # the assistant's answer.
    assert cached >= 16, follow.usage
    # The same conversation with another first image: the cache stops before that image's rows.
    history_other = [dict(history[0], content=[{"type": "image_url", "image_url": {"url": data_url(IMG_JPG, "image/jpeg")}},
                                                {"type": "text", "text": "Describe the colours in detail please."}]),
                     history[1]]
    other = openai_image_chat(client, data_url(IMG_A), question="And this one?", history=history_other)
    assert other.usage.prompt_tokens_details.cached_tokens < 16, other.usage
    assert other.usage.prompt_tokens_details.cached_tokens < cached


def test_image_requests_batch_with_text_requests(vision_server):
    client = OpenAI(base_url=vision_server.url + "/v1", api_key="x")

    def image_req(path):
        r = openai_image_chat(client, data_url(path), max_tokens=12)
        return r.choices[0].message.content, getattr(r.choices[0].message, "reasoning_content", None)

    def text_req(q):
        r = client.chat.completions.create(model="tiny-v", max_tokens=12, temperature=0,
                                           messages=[{"role": "user", "content": q}])
        return r.choices[0].message.content, getattr(r.choices[0].message, "reasoning_content", None)

    jobs = [("img", IMG_A), ("txt", "Tell me about rivers."), ("img", IMG_B), ("txt", "Name three colours.")]
    solo = [image_req(x) if k == "img" else text_req(x) for k, x in jobs]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
        futs = [ex.submit(image_req if k == "img" else text_req, x) for k, x in jobs]
        together = [f.result() for f in futs]
    assert together == solo


def test_corrupt_image_is_a_400_naming_the_part_and_harms_nothing(vision_server):
    raw = IMG_A.read_bytes()
    for body, what in [(raw[:60], "truncated"), (b"GIF89a" + b"\x00" * 10, "gif header only"),
                       (b"not an image at all", "text")]:
        r = requests.post(vision_server.url + "/v1/chat/completions", timeout=30, json={
            "model": "tiny-v", "max_tokens": 4,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(body).decode()}}]}]})
        assert r.status_code == 400, (what, r.text)
        err = r.json()["error"]
        assert "messages[0].content[1]" in err["message"], (what, err)
    # A too-large image (the server's --max-image-pixels) is refused before decoding.
    client = OpenAI(base_url=vision_server.url + "/v1", api_key="x")
    r = client.chat.completions.create(model="tiny-v", max_tokens=4, temperature=0,
                                       messages=[{"role": "user", "content": "still fine?"}])
    assert r.choices[0].finish_reason in ("stop", "length")
