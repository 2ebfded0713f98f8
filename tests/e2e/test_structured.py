"""Structured output end to end: `response_format` json_schema / json_object enforced while
sampling, on the real binary and the default model (SmolLM2-135M), through the official OpenAI
SDK. The content must validate (jsonschema) even though the model is tiny; a schema cut by
max_tokens says "length"; a schema feature that cannot be enforced is a 400 naming it;
constrained and free streams run together."""
import json
import threading

import jsonschema
import openai
import pytest

from serve_util import Server, assert_error_shape, http_get, http_post

THREADS = ["--threads", "2"]
HTTP_TIMEOUT = 90

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "maxLength": 40},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
        "role": {"enum": ["engineer", "designer", "manager"]},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age", "email", "languages", "role", "active"],
    "additionalProperties": False,
}


def person_format(schema=PERSON, strict=True):
    return {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": strict}}


@pytest.fixture(scope="module")
def server(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 2048, *THREADS)
    yield srv
    rc, _ = srv.stop(timeout=8)
    assert rc == 0, srv.stderr()[-3000:]


@pytest.fixture(scope="module")
def model_id(server):
    return http_get(server.url + "/v1/models", timeout=10).json()["data"][0]["id"]


@pytest.fixture(scope="module")
def client(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=HTTP_TIMEOUT, max_retries=0)
    yield c
    c.close()


def ask(text):
    return [{"role": "system", "content": "You are a helpful assistant that answers in JSON."},
            {"role": "user", "content": text}]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_validates(client, temperature, model_id):
    for seed in (1, 2) if temperature > 0 else (1,):
        r = client.chat.completions.create(model=model_id, messages=ask("Describe a software engineer."),
                                           response_format=person_format(), temperature=temperature,
                                           seed=seed, max_tokens=400)
        choice = r.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        data = json.loads(choice.message.content)
        jsonschema.validate(data, PERSON)


def test_json_schema_streamed_validates(client, model_id):
    parts, finish = [], None
    for chunk in client.chat.completions.create(model=model_id, messages=ask("Describe a designer."),
                                                response_format=person_format(), temperature=1.0, seed=5,
                                                max_tokens=400, stream=True):
        for c in chunk.choices:
            parts.append(c.delta.content or "")
            finish = c.finish_reason or finish
    assert finish == "stop"
    jsonschema.validate(json.loads("".join(parts)), PERSON)


def test_json_object_parses(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ask("Give me a JSON object describing a cat."),
                                       response_format={"type": "json_object"}, temperature=0, max_tokens=300)
    content = r.choices[0].message.content
    assert content.startswith("{"), content
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)
    else:
        assert r.choices[0].finish_reason == "length"


def test_json_object_sampled_parses(client, model_id):
    # A schema with nothing but "type": "object" would let a tiny model ramble; sampled
    # outputs that finish must still parse.
    n_stop = 0
    for seed in (1, 2, 3):
        r = client.chat.completions.create(model=model_id, messages=ask("A JSON object with a name and a number."),
                                           response_format={"type": "json_object"}, temperature=1.0, seed=seed,
                                           max_tokens=300)
        c = r.choices[0]
        assert c.message.content.startswith("{")
        if c.finish_reason == "stop":
            n_stop += 1
            assert isinstance(json.loads(c.message.content), dict)
    assert n_stop >= 1


def test_text_format_is_free(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ask("Say hello."), response_format={"type": "text"},
                                       temperature=0, max_tokens=8)
    assert r.choices[0].message.content


def test_cut_by_max_tokens_is_length(client, model_id):
    r = client.chat.completions.create(model=model_id, messages=ask("Describe an engineer."),
                                       response_format=person_format(), temperature=0, max_tokens=6)
    c = r.choices[0]
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 6
    assert c.message.content.startswith('{"name":"'), c.message.content


@pytest.mark.parametrize("schema,needle", [
    ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "if": {"required": ["a"]},
      "then": {"required": ["b"]}}, "'if'"),
    ({"type": "object", "properties": {"x": {"type": "number", "multipleOf": 0.25}}}, "multipleOf"),
])
def test_unsupported_schema_feature_is_400(client, schema, needle, model_id):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model_id, messages=ask("x"), response_format=person_format(schema),
                                       max_tokens=8)
    assert e.value.status_code == 400
    body = e.value.body
    assert needle in body["message"], body
    assert body["param"] == "response_format"


@pytest.mark.parametrize("fmt,param", [
    ({"type": "xml"}, "response_format.type"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": 3}}, "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {}, "strict": "yes"}},
     "response_format.json_schema.strict"),
    ("json", "response_format"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "frobnicate"}}}, "response_format"),
])
def test_malformed_response_format_is_400(server, fmt, param, model_id):
    r = http_post(server.url + "/v1/chat/completions",
                  json={"model": model_id, "messages": ask("x"), "response_format": fmt, "max_tokens": 4}, timeout=30)
    assert r.status_code == 400, r.text
    assert_error_shape(r.json())
    assert r.json()["error"]["param"] == param, r.text


def test_completions_endpoint_takes_response_format(server, model_id):
    r = http_post(server.url + "/v1/completions",
                  json={"model": model_id, "prompt": "A person as JSON:", "max_tokens": 300, "temperature": 0,
                        "response_format": person_format()}, timeout=HTTP_TIMEOUT)
    assert r.status_code == 200, r.text
    c = r.json()["choices"][0]
    assert c["finish_reason"] == "stop", c
    jsonschema.validate(json.loads(c["text"]), PERSON)


def test_concurrent_constrained_and_free_streams(client, model_id):
    free_prompt = ask("Write a sentence about rivers.")
    solo = client.chat.completions.create(model=model_id, messages=free_prompt, temperature=0, max_tokens=24)
    solo_text = solo.choices[0].message.content
    results, errors = {}, []

    def run(i):
        try:
            kw = dict(model=model_id, max_tokens=400, stream=True)
            if i % 2 == 0:
                kw.update(messages=ask(f"Describe person number {i}."), response_format=person_format(),
                          temperature=1.0, seed=100 + i)
            else:
                kw.update(messages=free_prompt, temperature=0, max_tokens=24)
            parts, finish = [], None
            for chunk in client.chat.completions.create(**kw):
                for c in chunk.choices:
                    parts.append(c.delta.content or "")
                    finish = c.finish_reason or finish
            results[i] = ("".join(parts), finish)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not errors, errors
    assert len(results) == 8, "a stream never finished"
    for i, (text, finish) in results.items():
        if i % 2 == 0:
            assert finish == "stop", text
            jsonschema.validate(json.loads(text), PERSON)
        else:
            assert (text, finish) == (solo_text, solo.choices[0].finish_reason)
