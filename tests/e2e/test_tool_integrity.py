"""Output integrity of tool calls on `hearth serve`, with the official openai and anthropic SDKs
against the real binary: a call that generation cut (max_tokens) is never returned as a call,
on both routes, streamed and not, at every budget and over several seeds; a forced tool_choice
is one call unless parallel calls were asked for; defer_loading tools stay out of the prompt;
an Anthropic request without `thinking` does not think; message_start's usage agrees with the
end's. Two templates: the default model's ChatML (the server injects a Hermes tool list) and
Qwen3.5's (Qwen XML calls, the answer starting inside <think>), both on the default weights —
under a grammar even the 135M model writes calls, so every budget cuts one somewhere."""
import concurrent.futures
import json

import anthropic
import jsonschema
import openai
import pytest

from serve_util import Server, http, http_get, http_post

THREADS = ["--threads", "2"]
TIMEOUT = 60

ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"], "additionalProperties": False}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object",
                   "properties": {"city": {"type": "string", "maxLength": 12},
                                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (ADD, WEATHER)}
MSGS = [{"role": "user", "content": "What is 2 + 3? And the weather in Jeju?"}]
MARKUP = ("<tool_call>", "<function=", "</tool_call>", '{"name"')


def anthropic_tools(tools):
    return [{"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"]} for t in tools]


def stop_server(srv):
    rc, _ = srv.stop(timeout=8)
    assert rc == 0, f"exit code {rc}\n{srv.stderr()[-3000:]}"


@pytest.fixture(scope="module", params=["chatml", "qwen35"])
def server(request, hearth_bin, default_model, shared_dir):
    args = ["--ctx", 2048, "--max-seqs", 4, *THREADS]
    if request.param == "qwen35":
        template = shared_dir / "data" / "chat-templates" / "Qwen3.5-4B.jinja"
        assert template.exists(), template
        args += ["--chat-template", template]
    srv = Server(hearth_bin, default_model, *args)
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def oai(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="x", timeout=TIMEOUT, max_retries=0)
    yield c
    c.close()


@pytest.fixture(scope="module")
def ant(server):
    c = anthropic.Anthropic(base_url=server.url, api_key="x", timeout=TIMEOUT, max_retries=0)
    yield c
    c.close()


def no_markup(text, where):
    for m in MARKUP:
        assert m not in (text or ""), f"{where}: tool-call markup leaked: {text!r}"


def check_calls(calls, where):
    """Every call returned is complete: a known tool, arguments that validate."""
    for name, args in calls:
        assert name in SCHEMAS, f"{where}: {name!r}"
        jsonschema.validate(args, SCHEMAS[name])


def openai_call(oai, stream, **kw):
    """(calls as [(name, args)], finish_reason, content, reasoning) of one chat completion."""
    if not stream:
        r = oai.chat.completions.create(model="m", messages=MSGS, **kw)
        m = r.choices[0].message
        calls = [(c.function.name, json.loads(c.function.arguments)) for c in m.tool_calls or []]
        return calls, r.choices[0].finish_reason, m.content, getattr(m, "reasoning_content", None)
    calls, finish, content, reasoning = {}, None, "", ""
    for chunk in oai.chat.completions.create(model="m", messages=MSGS, stream=True, **kw):
        if not chunk.choices:
            continue
        ch = chunk.choices[0]
        content += ch.delta.content or ""
        reasoning += getattr(ch.delta, "reasoning_content", None) or ""
        for tc in ch.delta.tool_calls or []:
            c = calls.setdefault(tc.index, {"name": "", "args": ""})
            c["name"] += (tc.function.name or "") if tc.function else ""
            c["args"] += (tc.function.arguments or "") if tc.function else ""
        finish = ch.finish_reason or finish
    # A streamed call's arguments must parse as they stand: nothing partial was ever sent.
    return [(c["name"], json.loads(c["args"])) for _, c in sorted(calls.items())], finish, content, reasoning


def anthropic_call(ant, stream, **kw):
    """(calls, stop_reason, text, thinking) of one message."""
    body = dict(model="m", messages=MSGS, **kw)
    if "temperature" in body:  # (no longer a parameter of this SDK's create())
        body["extra_body"] = {"temperature": body.pop("temperature")}
    if stream:
        with ant.messages.stream(**body) as s:
            msg = s.get_final_message()
    else:
        msg = ant.messages.create(**body)
    calls = [(b.name, b.input) for b in msg.content if b.type == "tool_use"]
    text = "".join(b.text for b in msg.content if b.type == "text")
    thinking = "".join(b.thinking for b in msg.content if b.type == "thinking")
    return calls, msg.stop_reason, text, thinking


def sweep(fn, cases):
    """fn(case) for every case, four at a time (the server batches them); results in order."""
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        return list(pool.map(fn, cases))


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_openai_forced_call_cut_at_every_budget_is_never_a_call(oai, stream):
    # Budgets 1..58 (a Qwen XML call is ~45 of the 135M model's tokens), greedy and sampled.
    cases = [(n, t, n) for n in range(1, 61, 3) for t in (0, 1.0)]
    results = sweep(lambda c: openai_call(oai, stream, tools=[ADD], tool_choice="required", max_tokens=c[0],
                                          temperature=c[1], seed=c[2]), cases)
    seen_cut = seen_call = 0
    for (max_tokens, temperature, seed), (calls, finish, content, reasoning) in zip(cases, results):
        where = f"max_tokens={max_tokens} T={temperature} seed={seed}"
        check_calls(calls, where)
        no_markup(content, where)
        no_markup(reasoning, where)
        assert len(calls) <= 1, where  # forced, parallel not asked: one call
        if calls:
            seen_call += 1
            assert finish in ("tool_calls", "length"), where
        else:
            seen_cut += 1
            assert finish == "length", where
    assert seen_cut > 0 and seen_call > 0


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_anthropic_forced_calls_cut_at_every_budget_are_dropped(ant, stream):
    choices = [{"type": "any"}, {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": False}]
    cases = [(n, t, c) for n in range(2, 62, 5) for t in (0, 1.0) for c in choices]
    results = sweep(lambda c: anthropic_call(ant, stream, tools=anthropic_tools([ADD, WEATHER]), tool_choice=c[2],
                                             max_tokens=c[0], temperature=c[1]), cases)
    seen_cut = seen_call = 0
    for (max_tokens, temperature, choice), (calls, stop, text, thinking) in zip(cases, results):
        where = f"max_tokens={max_tokens} T={temperature} {choice}"
        check_calls(calls, where)
        no_markup(text, where)
        no_markup(thinking, where)
        if choice["type"] == "any":
            assert len(calls) <= 1, where
        if calls:
            seen_call += 1
            assert stop in ("tool_use", "max_tokens"), where
        else:
            seen_cut += 1
            assert stop == "max_tokens", where
    assert seen_cut > 0 and seen_call > 0


def test_forced_choice_is_one_call_unless_parallel_is_asked(oai, ant):
    # Sampled, so a string argument may run long: a turn that ends on max_tokens has no call;
    # one that ends by itself has exactly one, never the repeats a grammar allowing more invites.
    def one(seed):
        out = [openai_call(oai, False, tools=[ADD, WEATHER], tool_choice="required", max_tokens=300,
                           temperature=1.0, seed=seed),
               openai_call(oai, True, tools=[ADD, WEATHER], max_tokens=300, temperature=1.0, seed=seed,
                           tool_choice={"type": "function", "function": {"name": "add"}})]
        calls, stop, _, _ = anthropic_call(ant, seed % 2 == 1, tools=anthropic_tools([ADD, WEATHER]),
                                           tool_choice={"type": "any"}, max_tokens=300, temperature=1.0)
        return out + [(calls, {"tool_use": "tool_calls", "max_tokens": "length"}.get(stop, stop), "", "")]
    n_complete = 0
    for seed, results in enumerate(sweep(one, range(4))):
        for k, (calls, finish, _, _) in enumerate(results):
            where = f"seed {seed} request {k}: {calls} {finish}"
            check_calls(calls, where)
            assert finish in ("tool_calls", "length"), where
            assert len(calls) == (1 if finish == "tool_calls" else 0), where
            if k == 1:
                assert all(name == "add" for name, _ in calls), where
            n_complete += finish == "tool_calls"
    assert n_complete >= 6
    # Parallel calls asked for: the grammar allows more than one, each complete.
    calls, finish, _, _ = openai_call(oai, False, tools=[ADD, WEATHER], tool_choice="required",
                                      parallel_tool_calls=True, max_tokens=200, temperature=1.0, seed=7)
    assert finish in ("tool_calls", "length")
    check_calls(calls, "parallel")


def test_structured_answer_cut_by_max_tokens_says_so(oai, ant):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = oai.chat.completions.create(
        model="m", messages=MSGS, max_tokens=4, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    assert r.choices[0].finish_reason == "length"
    with pytest.raises(openai.LengthFinishReasonError):  # the SDK's parse refuses it as incomplete
        oai.chat.completions.parse(
            model="m", messages=MSGS, max_tokens=4, temperature=0,
            response_format={"type": "json_schema", "json_schema": {"name": "p", "schema": schema}})
    msg = ant.messages.create(model="m", messages=MSGS, max_tokens=4,
                              output_config={"format": {"type": "json_schema", "schema": schema}})
    assert msg.stop_reason == "max_tokens"


def test_deferred_tools_stay_out_of_prompt_and_grammar(server, ant):
    tools = anthropic_tools([ADD, WEATHER])
    deferred = {"name": "DeferredToolPlaceholder", "description": "A tool loaded later by tool search",
                "input_schema": {"type": "object", "properties": {}}, "defer_loading": True}
    base = ant.messages.count_tokens(model="m", messages=MSGS, tools=tools).input_tokens
    with_deferred = ant.messages.count_tokens(model="m", messages=MSGS, tools=[deferred] + tools).input_tokens
    assert with_deferred == base
    for temperature in (0, 1.0):
        msg = ant.messages.create(model="m", messages=MSGS, tools=[deferred] + tools, tool_choice={"type": "any"},
                                  max_tokens=120, extra_body={"temperature": temperature})
        assert all(b.name != "DeferredToolPlaceholder" for b in msg.content if b.type == "tool_use")
    with pytest.raises(anthropic.BadRequestError) as e:
        ant.messages.create(model="m", messages=MSGS, tools=[deferred] + tools, max_tokens=5,
                            tool_choice={"type": "tool", "name": "DeferredToolPlaceholder"})
    assert "defer_loading" in str(e.value)


def test_no_thinking_field_means_no_thinking(server, ant, request):
    body = dict(model="m", messages=[{"role": "user", "content": "Hello there"}])
    absent = ant.messages.count_tokens(**body).input_tokens
    disabled = ant.messages.count_tokens(**body, thinking={"type": "disabled"}).input_tokens
    adaptive = ant.messages.count_tokens(**body, thinking={"type": "adaptive"}).input_tokens
    assert absent == disabled
    if "qwen35" in request.node.callspec.id:  # a template that thinks by default
        assert adaptive != disabled
        for stream in (False, True):
            _, _, _, thinking = anthropic_call(ant, stream, max_tokens=24, temperature=0)
            assert thinking == ""


def anthropic_events(server, body):
    r = http_post(server.url + "/v1/messages", json=body, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]


def test_message_start_usage_counts_the_prefix_cache(server):
    body = {"model": "m", "max_tokens": 4, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 24}]}
    for turn in range(2):
        events = anthropic_events(server, body)
        start = next(e for e in events if e["type"] == "message_start")["message"]["usage"]
        end = next(e for e in events if e["type"] == "message_delta")["usage"]
        assert start["input_tokens"] == end["input_tokens"], (turn, start, end)
        assert start["cache_read_input_tokens"] == end["cache_read_input_tokens"], (turn, start, end)
        if turn == 1:
            assert start["cache_read_input_tokens"] > 0, start


def test_claude_code_probe_answers(server):
    assert http_get(server.url + "/api/hello", timeout=10).status_code == 200
    assert http("HEAD", server.url + "/api/hello", timeout=10).status_code == 200
    assert http_post(server.url + "/v1/messages", json={}, timeout=10).status_code == 400
