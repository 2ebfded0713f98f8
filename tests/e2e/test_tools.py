"""Tool calls, reasoning, model names and token counting on `hearth serve` with the official
openai SDK, against the real binary on the default model (SmolLM2-135M, plain ChatML
template: the server injects a Hermes tool list and parses Hermes <tool_call> output).

The 135M model rarely writes a real tool call, so these tests check what is deterministic:
the request is accepted and validated, the tool list reaches the prompt (POST /tokenize with
messages + tools, detokenized), and every response is well formed whatever the model says.
The parsers and the formatting of calls are covered by tests/unit/server_output_parser_test
and server_format_test; reasoning runs here on a real thinking template (Qwen3.5's, which
opens <think> in the prompt) given with --chat-template."""
import json

import openai
import pytest

from serve_util import Server, assert_error_shape, http_get, http_post

THREADS = ["--threads", "2"]
CTX = 2048
HTTP_TIMEOUT = 60

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


def stop_server(srv):
    rc, _ = srv.stop(timeout=8)
    assert rc == 0, f"exit code {rc}\n{srv.stderr()[-3000:]}"


@pytest.fixture(scope="module")
def server(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", CTX, "--alias", "my-agent-model", "--alias", "gpt-4o-mini",
                 *THREADS)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def client(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=HTTP_TIMEOUT, max_retries=0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def qwen35_template(shared_dir):
    path = shared_dir / "data" / "chat-templates" / "Qwen3.5-4B.jinja"
    if not path.exists():
        pytest.skip(f"no {path}")
    return path


def post(server, path, body):
    return http_post(server.url + path, json=body, timeout=HTTP_TIMEOUT)


def detok(server, tokens):
    r = post(server, "/detokenize", {"tokens": tokens})
    assert r.status_code == 200, r.text
    return r.json()["content"]


def assert_well_formed_message(message, finish_reason):
    """A chat message whatever the model wrote: calls carry ids and JSON-object arguments."""
    assert message.role == "assistant"
    assert finish_reason in ("stop", "length", "tool_calls")
    if message.tool_calls:
        assert finish_reason in ("tool_calls", "length")
        ids = set()
        for call in message.tool_calls:
            assert call.type == "function" and call.id.startswith("call_") and call.id not in ids
            ids.add(call.id)
            assert call.function.name
            assert isinstance(json.loads(call.function.arguments), dict)
    else:
        assert isinstance(message.content, str)
        assert finish_reason != "tool_calls"


# ---------------------------------------------------------------------------
# Tools on a template without tool support: the Hermes list is injected


def test_tool_list_reaches_the_prompt(server):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    plain = post(server, "/tokenize", {"messages": msgs})
    with_tools = post(server, "/tokenize", {"messages": msgs, "tools": [WEATHER_TOOL]})
    assert plain.status_code == 200 and with_tools.status_code == 200, with_tools.text
    n_plain, n_tools = len(plain.json()["tokens"]), len(with_tools.json()["tokens"])
    assert n_tools > n_plain + 30
    prompt = detok(server, with_tools.json()["tokens"])
    assert "<tools>" in prompt and '"name":"get_weather"' in prompt and "<tool_call>" in prompt, prompt
    assert prompt.index("<tools>") < prompt.index("What is the weather")
    # tool_choice required / named are said in the prompt; none leaves the tools out.
    req = post(server, "/tokenize", {"messages": msgs, "tools": [WEATHER_TOOL], "tool_choice": "required"})
    assert "You must answer with a call" in detok(server, req.json()["tokens"])
    named = post(server, "/tokenize", {"messages": msgs, "tools": [WEATHER_TOOL],
                                       "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    assert 'the function "get_weather"' in detok(server, named.json()["tokens"])
    none = post(server, "/tokenize", {"messages": msgs, "tools": [WEATHER_TOOL], "tool_choice": "none"})
    assert len(none.json()["tokens"]) == n_plain


def test_tool_request_non_stream_and_stream_are_well_formed(client):
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the weather in Paris? Use the tool."}]
    for choice in ("auto", "required", {"type": "function", "function": {"name": "get_weather"}}):
        resp = client.chat.completions.create(model="any-name", messages=msgs, tools=[WEATHER_TOOL],
                                              tool_choice=choice, max_tokens=40, temperature=0)
        ch = resp.choices[0]
        assert_well_formed_message(ch.message, ch.finish_reason)

        stream = client.chat.completions.create(model="any-name", messages=msgs, tools=[WEATHER_TOOL],
                                                tool_choice=choice, max_tokens=40, temperature=0, stream=True)
        content, calls, finishes = [], {}, []
        for chunk in stream:
            for c in chunk.choices:
                if c.delta.content:
                    content.append(c.delta.content)
                for tc in c.delta.tool_calls or []:
                    if tc.id:
                        assert tc.index not in calls
                        calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": ""}
                    else:
                        calls[tc.index]["arguments"] += tc.function.arguments or ""
                if c.finish_reason:
                    finishes.append(c.finish_reason)
        assert len(finishes) == 1
        # Greedy: the stream says what the whole response said.
        assert finishes[0] == ch.finish_reason
        assert "".join(content) == (ch.message.content or "")
        assert [c["name"] for c in calls.values()] == [c.function.name for c in ch.message.tool_calls or []]
        for c in calls.values():
            assert isinstance(json.loads(c["arguments"]), dict)


def test_history_with_calls_and_results(client):
    """An agent's second turn: assistant calls (arguments a JSON string, or not JSON at all),
    content null, tool results, a later system message, reasoning echoed back."""
    msgs = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": None, "reasoning_content": "Two cities.",
         "tool_calls": [
             {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
             {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "Oslo, not JSON"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "Rain, 9 C"},
        {"role": "system", "content": "Answer in one sentence."},
    ]
    resp = client.chat.completions.create(model="any-name", messages=msgs, tools=[WEATHER_TOOL], max_tokens=20,
                                          temperature=0)
    assert_well_formed_message(resp.choices[0].message, resp.choices[0].finish_reason)


def test_tool_validation_errors(client):
    msgs = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=msgs, tools=[WEATHER_TOOL],
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    assert "nope" in str(e.value) and e.value.body["param"] == "tool_choice.function.name"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=msgs, tool_choice="required")
    assert e.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="m", messages=msgs, tools=[{"type": "function", "function": {}}])
    assert e.value.body["param"] == "tools[0].function.name"


# ---------------------------------------------------------------------------
# Model names, /v1/models, /tokenize, /detokenize


def test_any_model_name_is_served(server, client):
    for name in ("gpt-4o", "claude-sonnet-4-5", "my-agent-model"):
        resp = client.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=2)
        assert resp.model == name
    assert "requests for model 'gpt-4o' are served by" in server.stderr()
    assert server.stderr().count("requests for model 'gpt-4o'") == 1  # logged once


def test_models_lists_aliases(server):
    data = http_get(server.url + "/v1/models", timeout=10).json()["data"]
    ids = [m["id"] for m in data]
    assert ids[1:] == ["my-agent-model", "gpt-4o-mini"]
    assert data[0]["aliases"] == ["my-agent-model", "gpt-4o-mini"]
    assert all(m["context_length"] == CTX for m in data)


def test_strict_model_names(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 512, "--strict-model-names", "--alias", "ok-name", *THREADS)
    try:
        r = http_post(srv.url + "/v1/chat/completions", json={"model": "gpt-9", "messages": [
            {"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=HTTP_TIMEOUT)
        assert r.status_code == 404
        assert assert_error_shape(r.json())["code"] == "model_not_found"
        r = http_post(srv.url + "/v1/chat/completions", json={"model": "ok-name", "messages": [
            {"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=HTTP_TIMEOUT)
        assert r.status_code == 200, r.text
    finally:
        stop_server(srv)


def test_tokenize_detokenize(server):
    r = post(server, "/tokenize", {"content": "Hello world"})
    assert r.status_code == 200
    toks = r.json()["tokens"]
    assert toks and all(isinstance(t, int) for t in toks)
    assert detok(server, toks) == "Hello world"
    r = post(server, "/tokenize", {"content": "Hello world", "with_pieces": True})
    pieces = r.json()["tokens"]
    assert [p["id"] for p in pieces] == toks and "".join(p["piece"] for p in pieces) == "Hello world"
    # Special tokens parse; add_special adds the vocabulary's BOS when it asks for one.
    r = post(server, "/tokenize", {"content": "<|im_start|>user"})
    assert len(r.json()["tokens"]) <= 3
    # Errors name the field.
    for body, param in (({"content": 5}, "content"), ({"tokens": [1, -1]}, "tokens[1]"),
                        ({"tokens": "x"}, "tokens")):
        path = "/detokenize" if "tokens" in body else "/tokenize"
        r = post(server, path, body)
        assert r.status_code == 400, (body, r.text)
        assert assert_error_shape(r.json())["param"] == param
    r = http_post(server.url + "/tokenize", data="{oops", timeout=10, headers={"Content-Type": "application/json"})
    assert r.status_code == 400


# ---------------------------------------------------------------------------
# Reasoning on a template that opens <think> (Qwen3.5's, via --chat-template)


@pytest.fixture(scope="module")
def thinking_server(hearth_bin, default_model, qwen35_template):
    srv = Server(hearth_bin, default_model, "--ctx", CTX, "--chat-template", qwen35_template, *THREADS)
    yield srv
    stop_server(srv)


def test_reasoning_split_on_a_thinking_template(thinking_server):
    c = openai.OpenAI(base_url=thinking_server.url + "/v1", api_key="unused", timeout=HTTP_TIMEOUT, max_retries=0)
    msgs = [{"role": "user", "content": "What is 2 + 2?"}]
    resp = c.chat.completions.create(model="m", messages=msgs, max_tokens=24, temperature=0)
    m = resp.choices[0].message.model_dump()
    # The prompt ends inside <think>: what the model writes up to </think> is reasoning.
    assert m["reasoning_content"], m
    assert m["reasoning"] == m["reasoning_content"]
    assert "<think>" not in (m["content"] or "") and "<think>" not in m["reasoning_content"]

    stream = c.chat.completions.create(model="m", messages=msgs, max_tokens=24, temperature=0, stream=True)
    reasoning, reasoning2, content = "", "", ""
    for chunk in stream:
        for ch in chunk.choices:
            d = ch.delta.model_dump()
            reasoning += d.get("reasoning_content") or ""
            reasoning2 += d.get("reasoning") or ""
            content += d.get("content") or ""
    assert reasoning == m["reasoning_content"] and reasoning2 == reasoning
    assert content == (m["content"] or "")

    # enable_thinking false per request: the template closes the block in the prompt.
    r = post(thinking_server, "/tokenize", {"messages": msgs, "chat_template_kwargs": {"enable_thinking": False}})
    assert detok(thinking_server, r.json()["tokens"]).endswith("<think>\n\n</think>\n\n")
    resp = c.chat.completions.create(model="m", messages=msgs, max_tokens=12, temperature=0,
                                     extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert not resp.choices[0].message.model_dump().get("reasoning_content")
    c.close()


def test_reasoning_budget_and_format_none(hearth_bin, default_model, qwen35_template):
    srv = Server(hearth_bin, default_model, "--ctx", CTX, "--chat-template", qwen35_template,
                 "--reasoning-budget", "3", *THREADS)
    try:
        r = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a story."}],
                                               "max_tokens": 30, "temperature": 0})
        assert r.status_code == 200, r.text
        body = r.json()
        m = body["choices"][0]["message"]
        n_reasoning = len(post(srv, "/tokenize", {"content": m.get("reasoning_content", "")}).json()["tokens"])
        assert 1 <= n_reasoning <= 4, m  # cut after 3 tokens (a token may split differently re-encoded)
        assert body["usage"]["completion_tokens"] > 3
    finally:
        stop_server(srv)

    srv = Server(hearth_bin, default_model, "--ctx", CTX, "--chat-template", qwen35_template,
                 "--reasoning-format", "none", "--chat-template-kwargs", '{"enable_thinking": true}', *THREADS)
    try:
        r = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
                                               "temperature": 0})
        m = r.json()["choices"][0]["message"]
        assert "reasoning_content" not in m and m["content"]
    finally:
        stop_server(srv)


def test_bad_flags_fail_at_start(run_hearth, default_model):
    r = run_hearth("serve", "-m", default_model, "--port", "0", "--chat-template-kwargs", "[1]")
    assert r.returncode != 0 and "--chat-template-kwargs" in r.stderr
    r = run_hearth("serve", "-m", default_model, "--port", "0", "--reasoning-format", "weird")
    assert r.returncode != 0 and "--reasoning-format" in r.stderr
    r = run_hearth("serve", "-m", default_model, "--port", "0", "--chat-template", "/nonexistent.jinja")
    assert r.returncode != 0


# ---------------------------------------------------------------------------
# tool_choice "required" / a named function: enforced by a grammar, so even the 135M model
# returns a call whose arguments validate against the tool's schema.

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_files",
        "description": "Search files for a pattern",
        "parameters": {
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "maxLength": 20},
                "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
                "regex": {"type": "boolean"},
            },
            "required": ["pattern", "max_results", "regex"],
            "additionalProperties": False,
        },
    },
}


def streamed_calls(stream):
    """(calls as [{"id", "name", "arguments"}] by index, finish_reason) of a chat stream."""
    calls, finish = {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        for tc in choice.delta.tool_calls or []:
            c = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
            if tc.id:
                c["id"] = tc.id
            if tc.function and tc.function.name:
                c["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                c["arguments"] += tc.function.arguments
        if choice.finish_reason:
            finish = choice.finish_reason
    return [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("choice", ["required", "named"])
@pytest.mark.parametrize("temperature", [0, 1.0])
def test_tool_choice_is_enforced(client, choice, temperature):
    jsonschema = pytest.importorskip("jsonschema")
    tools = [WEATHER_TOOL, SEARCH_TOOL]
    tool_choice = "required" if choice == "required" else {"type": "function",
                                                            "function": {"name": "search_files"}}
    kw = dict(model="m", messages=[{"role": "user", "content": "Find TODO comments in the code."}],
              tools=tools, tool_choice=tool_choice, parallel_tool_calls=False, max_tokens=120,
              temperature=temperature, seed=7)
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}

    r = client.chat.completions.create(**kw)
    choice0 = r.choices[0]
    assert choice0.finish_reason == "tool_calls", choice0
    calls = choice0.message.tool_calls
    assert calls is not None and len(calls) == 1, choice0.message
    if choice == "named":
        assert calls[0].function.name == "search_files"
    assert calls[0].function.name in schemas
    assert calls[0].id and calls[0].type == "function"
    jsonschema.validate(json.loads(calls[0].function.arguments), schemas[calls[0].function.name])

    got, finish = streamed_calls(client.chat.completions.create(**kw, stream=True))
    assert finish == "tool_calls"
    assert len(got) == 1, got
    assert got[0]["id"] and got[0]["name"] in schemas
    jsonschema.validate(json.loads(got[0]["arguments"]), schemas[got[0]["name"]])
    if temperature == 0:  # greedy: the stream folds to the same call
        assert got[0]["name"] == calls[0].function.name
        assert json.loads(got[0]["arguments"]) == json.loads(calls[0].function.arguments)


def test_tool_choice_required_with_parallel_calls(client):
    jsonschema = pytest.importorskip("jsonschema")
    r = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "Weather in Paris and in Rome?"}],
        tools=[WEATHER_TOOL], tool_choice="required", max_tokens=60, temperature=0)
    assert r.choices[0].finish_reason in ("tool_calls", "length")
    if r.choices[0].finish_reason == "tool_calls":
        assert len(r.choices[0].message.tool_calls) >= 1
        for c in r.choices[0].message.tool_calls:
            assert c.function.name == "get_weather"
            jsonschema.validate(json.loads(c.function.arguments), WEATHER_TOOL["function"]["parameters"])


def test_tool_choice_with_an_unenforceable_schema_is_400(client):
    bad_tool = {"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "array", "uniqueItems": True}}}}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=[bad_tool],
                                       tool_choice="required", max_tokens=10)
    assert info.value.status_code == 400
    assert "uniqueItems" in info.value.body["message"] and "'f'" in info.value.body["message"]
    # The same tools with tool_choice auto are not constrained: no error.
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=[bad_tool],
                                       tool_choice="auto", max_tokens=5)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
