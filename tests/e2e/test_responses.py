"""OpenAI's Responses API (POST /v1/responses, GET / DELETE /v1/responses/{id}) of `hearth serve`
end to end, with the real binary, the default model and the official clients: the `openai` SDK
(plain and item inputs, a function tool round trip, text.format json_schema, max_output_tokens,
streaming event order, store + previous_response_id, errors). The OpenAI Agents SDK's default
model class (OpenAIResponsesModel) runs against this route in test_clients.py."""
import json
import pathlib
import subprocess
import sys

import jsonschema
import pytest
import requests

openai = pytest.importorskip("openai")

from serve_util import RawStream, Server, metrics, wait_for  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]

WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                  "additionalProperties": False}
WEATHER_TOOL = {"type": "function", "name": "get_weather", "description": "Get the current weather in a city.",
                "parameters": WEATHER_SCHEMA, "strict": True}


@pytest.fixture(scope="module")
def server(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 2048, "--threads", "2")
    yield srv
    rc, _ = srv.stop(timeout=8)
    assert rc == 0, srv.stderr()[-3000:]


@pytest.fixture(scope="module")
def client(server):
    c = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    yield c
    c.close()


def post(server, body):
    return requests.post(server.url + "/v1/responses", data=body if isinstance(body, str) else json.dumps(body),
                         headers={"Content-Type": "application/json"}, timeout=60)


def test_plain_string_input(client):
    r = client.responses.create(model="gpt-4o-mini", input="Say hello to the world.", max_output_tokens=24,
                                temperature=0)
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.status in ("completed", "incomplete")
    assert r.model == "gpt-4o-mini"  # echoed as asked
    assert r.output_text.strip()
    msg = r.output[-1]
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.content[0].type == "output_text"
    u = r.usage
    assert u.input_tokens > 0 and 0 < u.output_tokens <= 24
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert u.input_tokens_details.cached_tokens >= 0 and u.output_tokens_details.reasoning_tokens == 0
    assert r.store is False and r.error is None


def test_items_input_with_instructions(client):
    items = [{"role": "user", "content": "My favourite colour is green."},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Noted."}]},
             {"role": "user", "content": [{"type": "input_text", "text": "What is my favourite colour?"}]}]
    short = "Answer in one word."
    r = client.responses.create(input=items, instructions=short, max_output_tokens=12, temperature=0,
                                metadata={"run": "e2e"})
    assert r.instructions == short
    assert r.metadata == {"run": "e2e"}
    assert r.output_text.strip()
    # The instructions are in the prompt (the system message).
    longer = short + " Never use punctuation, never apologise and never explain anything at all."
    r2 = client.responses.create(input=items, instructions=longer, max_output_tokens=1, temperature=0)
    assert r2.usage.input_tokens >= r.usage.input_tokens + 10


def test_function_tool_round_trip(client):
    question = {"role": "user", "content": "What is the weather in Paris?"}
    r = client.responses.create(input=[question], tools=[WEATHER_TOOL], tool_choice="required",
                                parallel_tool_calls=False, max_output_tokens=60, temperature=0)
    assert r.status == "completed", r.incomplete_details
    assert r.tool_choice == "required" and r.parallel_tool_calls is False
    assert r.tools[0].name == "get_weather"
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1, r.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.id.startswith("fc_")
    assert call.status == "completed"
    jsonschema.validate(json.loads(call.arguments), WEATHER_SCHEMA)

    # Second turn: the call and its output go back; the model answers in text.
    follow = [question, *[o.model_dump(exclude_none=True) for o in r.output],
              {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}]
    r2 = client.responses.create(input=follow, tools=[WEATHER_TOOL], tool_choice="none", max_output_tokens=48,
                                 temperature=0)
    assert r2.status in ("completed", "incomplete")
    assert not [o for o in r2.output if o.type == "function_call"]  # tool_choice none
    assert r2.output_text.strip()
    # The call and its output are in the prompt.
    alone = client.responses.create(input=[question], tools=[WEATHER_TOOL], tool_choice="none", max_output_tokens=1)
    assert r2.usage.input_tokens >= alone.usage.input_tokens + 15


def test_cut_tool_call_is_never_returned(client):
    """A forced call cut by max_output_tokens: no function_call item (streamed or not), incomplete."""
    kw = dict(input="What is the weather in Paris?", tools=[WEATHER_TOOL], tool_choice="required",
              max_output_tokens=6, temperature=0)
    r = client.responses.create(**kw)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert not [o for o in r.output if o.type == "function_call"], r.output
    events = list(client.responses.create(**kw, stream=True))
    final = check_stream_events(events)
    assert final.status == "incomplete"
    assert not [e for e in events if e.type.startswith("response.function_call_arguments")]
    assert not [o for o in final.output if o.type == "function_call"]
    # Unset parallel_tool_calls under a forced choice: one call, the response ends by itself.
    r = client.responses.create(**dict(kw, max_output_tokens=80))
    assert r.status == "completed" and r.parallel_tool_calls is False
    assert len([o for o in r.output if o.type == "function_call"]) == 1


def test_text_format_json_schema(client):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.responses.create(input="Invent a person: give a name and an age as JSON.", max_output_tokens=60,
                                temperature=0,
                                text={"format": {"type": "json_schema", "name": "person", "schema": schema,
                                                 "strict": True}})
    assert r.status == "completed", r.incomplete_details
    assert r.text.format.type == "json_schema"
    jsonschema.validate(json.loads(r.output_text), schema)


def test_max_output_tokens_is_incomplete(client):
    r = client.responses.create(input="Write a long story about a dragon.", max_output_tokens=3, temperature=0)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3
    assert r.max_output_tokens == 3
    # A structured answer cut short is not complete either.
    r = client.responses.create(input="A person as JSON.", max_output_tokens=3, temperature=0,
                                text={"format": {"type": "json_object"}})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"


def check_stream_events(events):
    """The documented order; returns the final response."""
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert types[-1] in ("response.completed", "response.incomplete"), types
    seq = [e.sequence_number for e in events]
    assert seq == list(range(len(events))), seq
    final = events[-1].response
    open_items = {}
    for e in events[2:-1]:
        if e.type == "response.output_item.added":
            assert e.output_index == len(open_items) and e.output_index not in open_items
            open_items[e.output_index] = e.item.id
        elif e.type == "response.output_item.done":
            assert open_items[e.output_index] == e.item.id == final.output[e.output_index].id
        else:
            assert open_items.get(e.output_index) == e.item_id, e
    assert len(open_items) == len(final.output)
    return final


def test_streaming_text(client):
    events = list(client.responses.create(input="Say hello to the world.", max_output_tokens=20, temperature=0,
                                          stream=True))
    final = check_stream_events(events)
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and deltas == final.output_text
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and done[0].text == deltas
    types = [e.type for e in events]
    i = types.index("response.output_item.added")
    assert types[i + 1] == "response.content_part.added" and types[i + 2] == "response.output_text.delta"
    assert types[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert final.usage.output_tokens > 0


def test_streaming_function_call(client):
    # The SDK's stream helper (it needs response.completed and checks the event shapes).
    with client.responses.stream(model="gpt-4o-mini", input="What is the weather in Rome?", tools=[WEATHER_TOOL],
                                 tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=False,
                                 max_output_tokens=60, temperature=0) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert check_stream_events(events).id == final.id
    assert final.status == "completed"
    (call,) = [o for o in final.output if o.type == "function_call"]
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert args == done.arguments == call.arguments
    jsonschema.validate(json.loads(call.arguments), WEATHER_SCHEMA)


def test_store_and_previous_response_id(server, client):
    r1 = client.responses.create(input="My name is Bob and I live in Oslo.", max_output_tokens=16, temperature=0,
                                 store=True)
    assert r1.store is True
    got = client.responses.retrieve(r1.id)
    assert got.id == r1.id and got.output_text == r1.output_text
    r2 = client.responses.create(input="What is my name?", previous_response_id=r1.id, max_output_tokens=16,
                                 temperature=0)
    assert r2.previous_response_id == r1.id
    # The second prompt holds the first turn (its input and answer), mostly from the prefix cache.
    alone = client.responses.create(input="What is my name?", max_output_tokens=4, temperature=0)
    assert r2.usage.input_tokens >= alone.usage.input_tokens + r1.usage.output_tokens + 8
    assert r2.usage.input_tokens_details.cached_tokens > 0
    # Not stored (store defaults to false): no previous response, no GET.
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r2.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(input="again", previous_response_id=r2.id, max_output_tokens=4)
    # DELETE (requests sends Content-Length: 0 with it).
    d = requests.delete(f"{server.url}/v1/responses/{r1.id}", timeout=30)
    assert d.status_code == 200 and d.json() == {"id": r1.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(r1.id)
    assert requests.delete(f"{server.url}/v1/responses/{r1.id}", timeout=30).status_code == 404


def test_unknown_previous_response_id(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.responses.create(input="hi", previous_response_id="resp_doesnotexist", max_output_tokens=4)
    err = e.value.body
    assert err["code"] == "previous_response_not_found" and err["param"] == "previous_response_id"
    assert err["type"] == "invalid_request_error" and "resp_doesnotexist" in err["message"]


@pytest.mark.parametrize("body,param", [
    ('{"input": ', None),
    ({}, "input"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[1].content[0].image_url"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
    ({"input": "hi", "max_output_tokens": 0}, "max_output_tokens"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "schema": 3}}}, "text.format.schema"),
    ({"input": "hi", "reasoning": {"effort": "maximum"}}, "reasoning.effort"),
    ({"input": "hi", "temperature": "hot"}, "temperature"),
])
def test_malformed_bodies_are_400_naming_the_field(server, body, param):
    r = post(server, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["message"]
    assert err["param"] == param


def test_api_key_and_model_names(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 1024, "--threads", "2", "--api-key", "sekret",
                 "--strict-model-names", "--model-id", "m1")
    try:
        for key in ("wrong", None):
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            r = requests.post(srv.url + "/v1/responses", json={"input": "hi"}, headers=headers, timeout=30)
            assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
            assert requests.get(srv.url + "/v1/responses/resp_x", headers=headers, timeout=30).status_code == 401
        c = openai.OpenAI(base_url=srv.url + "/v1", api_key="sekret", max_retries=0, timeout=60)
        with pytest.raises(openai.NotFoundError) as e:
            c.responses.create(model="other", input="hi", max_output_tokens=2)
        assert e.value.body["code"] == "model_not_found"
        assert c.responses.create(model="m1", input="hi", max_output_tokens=2).usage.output_tokens > 0
        c.close()
    finally:
        srv.stop()


def test_disconnected_stream_is_cancelled(server):
    before = metrics(server)
    s = RawStream(server.host, server.port, "/v1/responses",
                  {"input": "Write a very long essay about the ocean.", "max_output_tokens": 1500, "stream": True,
                   "temperature": 0.7})
    try:
        assert s.status == 200
        assert s.read_events(4)  # created, in_progress, and the first item events
    finally:
        s.close()
    ok = wait_for(lambda: (lambda m: m["hearth_requests_running"] == 0
                           and m['hearth_requests_total{outcome="cancelled"}']
                           == before['hearth_requests_total{outcome="cancelled"}'] + 1)(metrics(server)),
                  timeout=3)
    assert ok, metrics(server)
    assert metrics(server)["hearth_generation_tokens_total"] < before["hearth_generation_tokens_total"] + 1500


# ---------------------------------------------------------------------------
# Reasoning: a tiny random-weight Qwen3.5 model (its template opens <think> in the prompt)


@pytest.fixture(scope="module")
def thinking_server(hearth_bin, shared_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen35")
    subprocess.run([sys.executable, str(REPO / "benchmarks/make_qwen35_model.py"), str(out / "hf"),
                    "--shared", str(shared_dir / "data"), "--hidden", "64", "--layers", "4", "--intermediate", "128",
                    "--heads", "2", "--kv-heads", "1", "--head-dim", "32", "--linear-key-heads", "2",
                    "--linear-key-dim", "16", "--linear-value-dim", "16", "--dtype", "f32", "--std", "0.5",
                    "--seed", "3"], check=True, capture_output=True, text=True, timeout=300)
    p = subprocess.run([str(hearth_bin), "convert", str(out / "hf"), "-o", str(out / "tiny.gguf"), "--type", "f32"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    srv = Server(hearth_bin, out / "tiny.gguf", "--threads", "2", "--ctx", "4096")
    yield srv
    srv.stop()


def test_reasoning_effort(thinking_server):
    c = openai.OpenAI(base_url=thinking_server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    # none: thinking off in the template (enable_thinking false): no reasoning item.
    r = c.responses.create(input="Hi", max_output_tokens=8, temperature=0, reasoning={"effort": "none"})
    assert [o.type for o in r.output] == ["message"]
    assert r.usage.output_tokens_details.reasoning_tokens == 0
    assert r.reasoning.effort == "none"
    # low: thinking on, capped at 1024 tokens, after which the answer follows.
    r = c.responses.create(input="Hi", max_output_tokens=1040, temperature=0, reasoning={"effort": "low"})
    assert [o.type for o in r.output] == ["reasoning", "message"], r.output
    rs = r.output[0]
    assert rs.id.startswith("rs_") and rs.summary == [] and rs.content[0].type == "reasoning_text"
    assert rs.content[0].text
    assert 1024 <= r.usage.output_tokens_details.reasoning_tokens <= 1030
    # The reasoning item goes back in the next turn's input without error.
    r2 = c.responses.create(input=[{"role": "user", "content": "Hi"},
                                   *[o.model_dump(exclude_none=True) for o in r.output],
                                   {"role": "user", "content": "And then?"}],
                            max_output_tokens=4, temperature=0, reasoning={"effort": "high"})
    assert r2.status == "incomplete" and r2.output[0].type == "reasoning"
    # Streamed: reasoning_text deltas join to the item's text.
    events = list(c.responses.create(input="Hi", max_output_tokens=12, temperature=0, stream=True))
    final = check_stream_events(events)
    text = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert text and text == final.output[0].content[0].text
    (done,) = [e for e in events if e.type == "response.reasoning_text.done"]
    assert done.text == text
    c.close()
