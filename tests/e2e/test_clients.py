"""Real agent clients, installed from PyPI at pinned versions (requirements/test.txt), driven
against the real `hearth serve` binary: LiteLLM (OpenAI and Anthropic routes), LangChain's
ChatOpenAI, Pydantic AI, the OpenAI Agents SDK's Responses model, and Claude Code headless (the
`claude` CLI shipped in the claude-agent-sdk wheel) on a tiny random-weight Qwen3.5 with a long
context. Model quality is not the point: every request a client sends must be accepted, every
response parsed, every turn completed without an API error. Forced tool choices are enforced by
the server's grammar, so there the calls must be complete, parse and match the tool's schema.

No network besides loopback: each client's offline switches are set, and a guard refuses (and
records) any socket this process opens to another address; the Claude Code subprocess gets as
HTTP(S)_PROXY a loopback recorder that refuses (and records) everything but 127.0.0.1."""
import asyncio
import dataclasses
import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import threading
import time

# Before the clients are imported: LiteLLM reads these at import time.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # its bundled cost map, no download
os.environ["LITELLM_OFFLINE_MODE"] = "true"  # nothing fetched on its own (tokenizers, catalogs)
os.environ["LITELLM_TELEMETRY"] = "False"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["LANGSMITH_TRACING"] = "false"
os.environ["LANGCHAIN_TRACING_V2"] = "false"
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

import agents  # noqa: E402
import claude_agent_sdk  # noqa: E402
import jsonschema  # noqa: E402
import litellm  # noqa: E402
import openai  # noqa: E402
import pydantic  # noqa: E402
import pytest  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool as lc_tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from pydantic_ai import Agent as PydanticAgent  # noqa: E402
from pydantic_ai.capabilities import AbstractCapability  # noqa: E402
from pydantic_ai.exceptions import ModelAPIError, UnexpectedModelBehavior, UsageLimitExceeded  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402
from pydantic_ai.usage import UsageLimits  # noqa: E402

from serve_util import Server, http_post  # noqa: E402

litellm.telemetry = False
litellm.suppress_debug_info = True

# LiteLLM's types trip a Pydantic warning about TypedDict ReadOnly items at import and first use.
pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")

REPO = pathlib.Path(__file__).resolve().parents[2]
THREADS = ["--threads", "2"]
HTTP_TIMEOUT = 120
PROMPT = "What is the weather in Paris?"
WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                  "required": ["city"]}
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather in a city.",
                                                 "parameters": WEATHER_PARAMS}}
# Enough for one forced call of get_weather on the default model (temperature 0): a forced call
# cut by max_tokens is an error of the server, not a complete call.
TOOL_MAX_TOKENS = 120
# One line of the server's request log: "POST /v1/messages 200 127.0.0.1:PORT".
REQUEST_LINE_RE = re.compile(r"\b(GET|HEAD|POST|PUT|DELETE|OPTIONS) (/\S*) (\d{3})\b")


# ---------------------------------------------------------------------------
# Loopback only.

_LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|::1|localhost|::ffff:127\.\d+\.\d+\.\d+)$")
_outside = []


@pytest.fixture(scope="module", autouse=True)
def loopback_only():
    """Refuse and record every connection this process opens to a non-loopback address."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def check(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not _LOOPBACK.match(str(address[0])):
            _outside.append(address)
            raise ConnectionRefusedError(f"test_clients: no network besides loopback ({address!r})")

    def connect(sock, address):
        check(sock, address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        check(sock, address)
        return real_connect_ex(sock, address)

    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    try:
        yield
    finally:
        socket.socket.connect, socket.socket.connect_ex = real_connect, real_connect_ex
    assert not _outside, f"a client tried to reach the network: {_outside}"


# ---------------------------------------------------------------------------
# Servers.


def stop_server(srv):
    rc, _ = srv.stop(timeout=8)
    assert rc == 0, f"exit code {rc} after SIGTERM\n{srv.stderr()[-3000:]}"


@pytest.fixture(scope="module")
def server(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 4096, "--max-seqs", 2, *THREADS)
    yield srv
    stop_server(srv)


@pytest.fixture
def log_on_failure(request):
    """Servers whose request log is printed (in the failing test's report) when the test fails:
    call with a Server. The call phase's report is logged before teardown runs."""
    watched = []
    failed_before = request.session.testsfailed
    yield watched.append
    if request.session.testsfailed > failed_before:
        for srv in watched:
            print(f"---- hearth serve stderr ({srv.url}) ----\n{srv.stderr()[-6000:]}")


def check_forced_call(name, arguments):
    """A forced call: the tool's name, arguments a JSON object of its schema."""
    assert name == "get_weather"
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(args, WEATHER_PARAMS)
    return args


class Weather(pydantic.BaseModel):
    city: str
    temperature_c: int


# ---------------------------------------------------------------------------
# LiteLLM.


def litellm_kwargs(srv, route):
    if route == "openai":
        return {"model": "openai/hearth-anything", "api_base": srv.url + "/v1", "api_key": "unused"}
    # LiteLLM's Anthropic provider with a custom base: it posts to {api_base}/v1/messages.
    return {"model": "anthropic/claude-sonnet-4-5", "api_base": srv.url, "api_key": "unused"}


def litellm_turn(srv, route, messages, stream, **kw):
    args = dict(litellm_kwargs(srv, route), messages=messages, temperature=0, timeout=HTTP_TIMEOUT, num_retries=0)
    args.update(kw)
    if not stream:
        return litellm.completion(**args)
    chunks = list(litellm.completion(stream=True, **args))
    assert chunks
    return litellm.stream_chunk_builder(chunks, messages=messages)


@pytest.mark.parametrize("route", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_litellm_forced_tool_call_and_tool_result_turn(server, route, stream, log_on_failure):
    """tool_choice "required" (Anthropic: {"type": "any"}): exactly one complete call of the
    function tool, with arguments of its schema; then the tool's result goes back and the second
    turn ends with an answer."""
    log_on_failure(server)
    messages = [{"role": "user", "content": PROMPT}]
    r = litellm_turn(server, route, messages, stream, tools=[WEATHER_TOOL], tool_choice="required",
                     max_tokens=TOOL_MAX_TOKENS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", (choice.finish_reason, choice.message)
    calls = choice.message.tool_calls
    # No parallel_tool_calls in the request: one call.
    assert calls and len(calls) == 1, calls
    check_forced_call(calls[0].function.name, calls[0].function.arguments)
    assert calls[0].id

    messages += [{"role": "assistant", "content": choice.message.content or None,
                  "tool_calls": [{"id": calls[0].id, "type": "function",
                                  "function": {"name": calls[0].function.name,
                                               "arguments": calls[0].function.arguments}}]},
                 {"role": "tool", "tool_call_id": calls[0].id, "content": "Sunny, 21 C"}]
    r2 = litellm_turn(server, route, messages, stream, tools=[WEATHER_TOOL], max_tokens=40)
    c2 = r2.choices[0]
    assert c2.finish_reason in ("stop", "length", "tool_calls"), c2
    if c2.finish_reason == "tool_calls":
        for call in c2.message.tool_calls:
            assert call.function.name == "get_weather"
            json.loads(call.function.arguments)
    else:
        assert isinstance(c2.message.content, str) and c2.message.content
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens


@pytest.mark.parametrize("route", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("max_tokens", [2, 10])
def test_litellm_forced_tool_call_cut_by_max_tokens(server, route, stream, max_tokens, log_on_failure):
    """A forced call that max_tokens cuts is no call: finish_reason "length" (Anthropic:
    stop_reason "max_tokens"), no tool_calls, and no fragment of the call's markup as content
    (under a forced choice every generated token belongs to the call)."""
    log_on_failure(server)
    messages = [{"role": "user", "content": PROMPT}]
    r = litellm_turn(server, route, messages, stream, tools=[WEATHER_TOOL], tool_choice="required",
                     max_tokens=max_tokens)
    c = r.choices[0]
    assert c.finish_reason == "length", c
    assert not c.message.tool_calls, c.message.tool_calls
    assert not (c.message.content or "").strip(), repr(c.message.content)


def test_litellm_plain_chat_both_routes(server, log_on_failure):
    """No tools: a plain answer over each route (the text LiteLLM hands back is the model's)."""
    log_on_failure(server)
    for route in ("openai", "anthropic"):
        for stream in (False, True):
            r = litellm_turn(server, route, [{"role": "system", "content": "Answer briefly."},
                                             {"role": "user", "content": "Say hello."}], stream, max_tokens=16)
            c = r.choices[0]
            assert c.finish_reason in ("stop", "length"), (route, stream, c)
            assert isinstance(c.message.content, str) and c.message.content, (route, stream, c)
            assert not getattr(c.message, "reasoning_content", None), (route, stream, c.message)
            assert r.usage.completion_tokens >= 1


# ---------------------------------------------------------------------------
# LangChain (langchain-openai's ChatOpenAI on chat completions).


@lc_tool
def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"Sunny, 21 C in {city}"


def chat_openai(srv, **kw):
    return ChatOpenAI(base_url=srv.url + "/v1", api_key="unused", model="hearth-anything", temperature=0,
                      max_retries=0, timeout=HTTP_TIMEOUT, use_responses_api=False, stream_usage=True, **kw)


def lc_result(runnable, messages, stream):
    if not stream:
        return runnable.invoke(messages)
    acc = None
    for chunk in runnable.stream(messages):
        acc = chunk if acc is None else acc + chunk
    assert acc is not None
    return acc


@pytest.mark.parametrize("tool_choice", ["any", "get_weather"])
@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_langchain_bind_tools_forced(server, tool_choice, stream, log_on_failure):
    """bind_tools(tool_choice="any" / the tool's name): one call whose args are a dict of the
    tool's schema, none invalid; a ToolMessage with its result makes the next turn."""
    log_on_failure(server)
    llm = chat_openai(server, max_tokens=TOOL_MAX_TOKENS)
    bound = llm.bind_tools([get_weather], tool_choice=tool_choice)
    messages = [HumanMessage(PROMPT)]
    msg = lc_result(bound, messages, stream)
    assert not msg.invalid_tool_calls, msg.invalid_tool_calls
    assert len(msg.tool_calls) == 1, msg.tool_calls
    call = msg.tool_calls[0]
    assert isinstance(call["args"], dict)
    check_forced_call(call["name"], call["args"])
    assert call["id"]
    finish = msg.response_metadata.get("finish_reason")
    assert finish == "tool_calls", msg.response_metadata

    # The tool runs (LangChain's own ToolCall invocation) and its message goes back.
    tool_msg = get_weather.invoke(call)
    assert isinstance(tool_msg, ToolMessage) and tool_msg.tool_call_id == call["id"]
    follow = lc_result(chat_openai(server, max_tokens=40).bind_tools([get_weather]),
                       messages + [AIMessage(content=msg.content, tool_calls=msg.tool_calls), tool_msg], stream)
    assert not follow.invalid_tool_calls, follow.invalid_tool_calls
    assert follow.content or follow.tool_calls
    assert follow.response_metadata.get("finish_reason") in ("stop", "length", "tool_calls"), follow.response_metadata


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_langchain_forced_tool_call_cut_by_max_tokens(server, stream, log_on_failure):
    """max_tokens cuts the forced call: no tool call, valid or invalid, and no markup as content."""
    log_on_failure(server)
    bound = chat_openai(server, max_tokens=2).bind_tools([get_weather], tool_choice="any")
    msg = lc_result(bound, [HumanMessage(PROMPT)], stream)
    assert msg.response_metadata.get("finish_reason") == "length", msg.response_metadata
    assert not msg.tool_calls and not msg.invalid_tool_calls, (msg.tool_calls, msg.invalid_tool_calls)
    assert not msg.content.strip(), repr(msg.content)


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_langchain_with_structured_output(server, method, log_on_failure):
    """with_structured_output: a forced named tool (function_calling) or response_format
    json_schema (strict): either way a Weather comes back parsed."""
    log_on_failure(server)
    llm = chat_openai(server, max_tokens=TOOL_MAX_TOKENS).with_structured_output(Weather, method=method,
                                                                                 include_raw=True)
    out = llm.invoke("The weather in Paris is 21 degrees.")
    assert out["parsing_error"] is None, out
    assert isinstance(out["parsed"], Weather), out


@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "stream"])
def test_langchain_bind_tools_auto(server, stream, log_on_failure):
    """Tools offered, the choice left to the model: whatever it answers parses."""
    log_on_failure(server)
    msg = lc_result(chat_openai(server, max_tokens=60).bind_tools([get_weather]), [HumanMessage(PROMPT)], stream)
    assert not msg.invalid_tool_calls, msg.invalid_tool_calls
    for call in msg.tool_calls:
        assert call["name"] == "get_weather" and isinstance(call["args"], dict), call
    assert msg.content or msg.tool_calls
    assert msg.usage_metadata and msg.usage_metadata["input_tokens"] > 0, msg.usage_metadata


# ---------------------------------------------------------------------------
# Pydantic AI.


def pydantic_model(srv):
    provider = OpenAIProvider(base_url=srv.url + "/v1", api_key="unused")
    return OpenAIChatModel("hearth-anything", provider=provider)


def api_error_in_chain(exc):
    """The first HTTP / protocol error in exc's cause chain, or None."""
    seen = exc
    while seen is not None:
        if isinstance(seen, (ModelAPIError, openai.APIError, pydantic.ValidationError)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def test_pydantic_ai_agent_with_a_tool(server, log_on_failure):
    """An Agent with one tool_plain runs to a final result (streamed and not). Whether the 135M
    model calls the tool is up to it; when it does, the round trip works. The only tolerated
    failure is the model's own answer content (UnexpectedModelBehavior with no HTTP/protocol error
    under it), or it calling the tool until the request limit."""
    log_on_failure(server)
    calls = []
    agent = PydanticAgent(pydantic_model(server), instructions="Answer briefly. Use tools when useful.",
                          retries=1, model_settings={"max_tokens": 60, "temperature": 0})

    @agent.tool_plain
    def weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"Sunny, 21 C in {city}"

    async def streamed():
        async with agent.run_stream(PROMPT, usage_limits=UsageLimits(request_limit=4)) as run:
            return await run.get_output()

    limits = UsageLimits(request_limit=4)
    for mode in ("run_sync", "run_stream"):
        calls.clear()
        try:
            if mode == "run_sync":
                result = agent.run_sync(PROMPT, usage_limits=limits)
                output = result.output
                kinds = [p.part_kind for m in result.all_messages() for p in m.parts]
                if calls:
                    assert "tool-call" in kinds and "tool-return" in kinds, kinds
            else:
                output = asyncio.run(streamed())
        except UsageLimitExceeded:
            assert calls, "request limit hit without a tool call"  # it kept calling: round trips worked
            continue
        except UnexpectedModelBehavior as e:
            assert api_error_in_chain(e) is None, repr(api_error_in_chain(e))
            continue
        assert isinstance(output, str), (mode, output)


@dataclasses.dataclass
class ForceAToolFirst(AbstractCapability):
    """tool_choice "required" on the run's first model request only (Pydantic AI's per-step
    settings): the first answer is a call, the next one is free to end the run."""

    def get_model_settings(self):
        return lambda ctx: {"tool_choice": "required"} if ctx.run_step <= 1 else {}


def test_pydantic_ai_tool_round_trip(server, log_on_failure):
    """The tool forced on the first step: Pydantic AI runs it, sends its return back, and the
    second request ends the run with text (streamed and not)."""
    log_on_failure(server)
    calls = []
    agent = PydanticAgent(pydantic_model(server), instructions="Answer briefly.", retries=1,
                          model_settings={"max_tokens": TOOL_MAX_TOKENS, "temperature": 0},
                          capabilities=[ForceAToolFirst()])

    @agent.tool_plain
    def weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"Sunny, 21 C in {city}"

    async def streamed():
        async with agent.run_stream(PROMPT, usage_limits=UsageLimits(request_limit=3)) as run:
            output = await run.get_output()
        return output, run.all_messages()

    for mode in ("run_sync", "run_stream"):
        calls.clear()
        if mode == "run_sync":
            result = agent.run_sync(PROMPT, usage_limits=UsageLimits(request_limit=3))
            output, history = result.output, result.all_messages()
        else:
            output, history = asyncio.run(streamed())
        kinds = [[p.part_kind for p in m.parts] for m in history]
        assert len(calls) == 1 and isinstance(calls[0], str), (mode, calls)
        assert kinds[1] == ["tool-call"] and kinds[2] == ["tool-return"], (mode, kinds)
        assert isinstance(output, str), (mode, output)


def test_pydantic_ai_structured_output_through_a_forced_tool(server, log_on_failure):
    """output_type a Pydantic model: Pydantic AI offers its final_result tool and forces a tool
    call (tool_choice "required"); the grammar makes the arguments valid, so the run ends with a
    Weather on the first request."""
    log_on_failure(server)
    agent = PydanticAgent(pydantic_model(server), output_type=Weather, retries=1,
                          instructions="Report the weather.", model_settings={"max_tokens": TOOL_MAX_TOKENS,
                                                                               "temperature": 0})
    result = agent.run_sync("The weather in Paris is 21 degrees.", usage_limits=UsageLimits(request_limit=2))
    assert isinstance(result.output, Weather), result.output
    assert result.usage.requests == 1, result.usage


# ---------------------------------------------------------------------------
# The OpenAI Agents SDK's default model class: Responses (needs POST /v1/responses).


@pytest.fixture(scope="module")
def responses_route(server):
    """The server, once POST /v1/responses answered a plain request."""
    r = http_post(server.url + "/v1/responses", json={"model": "x", "input": "Hi", "max_output_tokens": 2},
                  timeout=HTTP_TIMEOUT)
    assert r.status_code == 200, (r.status_code, r.text)
    return server


@pytest.fixture
def agents_responses_default(responses_route):
    """The SDK's defaults pointed at hearth (Responses API, tracing off), restored afterwards."""
    from agents.models import _openai_shared

    saved = (_openai_shared.get_default_openai_client(), _openai_shared.get_use_responses_by_default())
    client = openai.AsyncOpenAI(base_url=responses_route.url + "/v1", api_key="unused", max_retries=0,
                                timeout=HTTP_TIMEOUT)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_default_openai_api("responses")
    agents.set_tracing_disabled(True)
    yield responses_route
    _openai_shared.set_default_openai_client(saved[0])
    _openai_shared.set_use_responses_by_default(saved[1])


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_agents_sdk_responses_model_tool_round_trip(agents_responses_default, stream, log_on_failure):
    """Agent(model="gpt-4o-mini") resolves to OpenAIResponsesModel: tool_choice "required" makes
    the first turn a call of the function tool; the SDK runs it and sends function_call_output
    back; the next turn (tool choice reset) ends the run with a message."""
    log_on_failure(agents_responses_default)
    calls = []

    @agents.function_tool
    def get_weather_tool(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"Sunny, 21 C in {city}"

    agent = agents.Agent(name="weather", instructions="Answer briefly.", tools=[get_weather_tool],
                         model="gpt-4o-mini", reset_tool_choice=True,
                         model_settings=agents.ModelSettings(tool_choice="required", max_tokens=TOOL_MAX_TOKENS,
                                                             temperature=0, parallel_tool_calls=False))
    assert type(agents.models.openai_provider.OpenAIProvider().get_model("gpt-4o-mini")).__name__ == \
        "OpenAIResponsesModel"

    async def run():
        if stream:
            result = agents.Runner.run_streamed(agent, PROMPT, max_turns=4)
            async for _ in result.stream_events():
                pass
            return result
        return await agents.Runner.run(agent, PROMPT, max_turns=4)

    log_before = len(agents_responses_default.stderr())
    result = asyncio.run(run())
    seen = REQUEST_LINE_RE.findall(agents_responses_default.stderr()[log_before:])
    assert len(seen) >= 2 and all(r == ("POST", "/v1/responses", "200") for r in seen), seen
    assert len(calls) >= 1 and all(isinstance(c, str) for c in calls), calls
    items = [type(i).__name__ for i in result.new_items]
    assert items[:2] == ["ToolCallItem", "ToolCallOutputItem"], items
    assert items[-1] == "MessageOutputItem", items
    assert isinstance(result.final_output, str)


# ---------------------------------------------------------------------------
# Claude Code, headless, on a tiny random-weight Qwen3.5 with a long context.


# Random weights never choose <|im_end|>: every answer would run to max_tokens, which Claude Code
# reports as "API Error: Claude's response exceeded the N output token maximum" (and retries
# three times). So the tiny model gets one more property: its answers end within a few tokens.
# Every embedding row gets the same large value in dimension 0; the residual stream is then
# dominated by it, the final norm makes h[0] = sqrt(hidden) = 8 whatever the prompt, and with
# the tied output embedding a token whose row is BOOST higher there gets 8 * BOOST more logit
# than the rest. <|im_end|>, </think> and six word tokens are boosted alike: each next token is
# one of them with probability ~0.85 (<|im_end|>: ~0.14; the rest is noise from the other 151k),
# so an answer ends after ~7 tokens on average (none of 100 is <|im_end|>: p < 1e-6).
SHORT_ANSWER_OFFSET = 1e5
SHORT_ANSWER_BOOST = 1.45
SHORT_ANSWER_TOKENS = [151645,  # <|im_end|>
                       151668,  # </think>
                       9707, 279, 3542, 8527, 13, 576]  # "Hello", " the", " files", " folder", ".", " The"


def make_answers_short(hf):
    """Rewrites the embedding of a make_qwen35_model.py folder in place (see above)."""
    import numpy as np
    import struct

    path = hf / "model.safetensors"
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        t = header["model.embed_tokens.weight"]
        assert t["dtype"] == "F32", t
        begin, end = t["data_offsets"]
        f.seek(8 + n + begin)
        emb = np.frombuffer(f.read(end - begin), dtype="<f4").reshape(t["shape"]).copy()
        emb[:, 0] = SHORT_ANSWER_OFFSET
        emb[SHORT_ANSWER_TOKENS, 0] = SHORT_ANSWER_OFFSET + SHORT_ANSWER_BOOST
        f.seek(8 + n + begin)
        f.write(emb.tobytes())


@pytest.fixture(scope="module")
def qwen35_server(tmp_path_factory, shared_dir, hearth_bin):
    """A tiny random-weight Qwen3.5 (test_hybrid.py's shape) whose answers end after a few
    tokens, served with a context long enough for Claude Code's ~20k-token requests."""
    out = tmp_path_factory.mktemp("qwen35_cc")
    hf = out / "hf"
    subprocess.run([sys.executable, str(REPO / "benchmarks/make_qwen35_model.py"), str(hf),
                    "--shared", str(shared_dir / "data"),
                    "--hidden", "64", "--layers", "4", "--intermediate", "128", "--heads", "2",
                    "--kv-heads", "1", "--head-dim", "32", "--linear-key-heads", "2",
                    "--linear-key-dim", "16", "--linear-value-dim", "16", "--dtype", "f32",
                    "--std", "0.5", "--seed", "3"],
                   check=True, capture_output=True, text=True, timeout=300)
    make_answers_short(hf)
    gguf = out / "tiny.f32.gguf"
    p = subprocess.run([str(hearth_bin), "convert", str(hf), "-o", str(gguf), "--type", "f32"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    srv = Server(hearth_bin, gguf, *THREADS, "--ctx", 40960, "--max-seqs", 2, "--kv-cache-bytes", "256M")
    yield srv
    stop_server(srv)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_litellm_anthropic_thinking_on_qwen35(qwen35_server, stream, log_on_failure):
    """LiteLLM's Anthropic route on a thinking model: without `thinking` in the request no
    thinking comes back; with it, whatever thinking comes back is a signed thinking block that
    LiteLLM hands over as thinking_blocks / reasoning_content."""
    log_on_failure(qwen35_server)
    messages = [{"role": "user", "content": "Hello"}]
    # Sampled (temperature 1): greedy, this model repeats one token, and LiteLLM's stream
    # wrapper raises on a chunk repeated many times in a row.
    r = litellm_turn(qwen35_server, "anthropic", messages, stream, max_tokens=64, temperature=1)
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length"), c
    assert not getattr(c.message, "thinking_blocks", None), c.message
    assert not getattr(c.message, "reasoning_content", None), c.message

    r = litellm_turn(qwen35_server, "anthropic", messages, stream, max_tokens=256, temperature=1,
                     thinking={"type": "enabled", "budget_tokens": 128})
    c = r.choices[0]
    assert c.finish_reason in ("stop", "length"), c
    for block in getattr(c.message, "thinking_blocks", None) or []:
        assert block["type"] == "thinking" and isinstance(block["thinking"], str), block
        assert block.get("signature"), block
    # (Sampled: the short-answer model may end at once, <|im_end|> right after <think>.)
    assert r.usage.prompt_tokens > 0 and r.usage.completion_tokens >= 0


class ProxyRecorder:
    """A loopback "proxy" that refuses everything: it records the request line each connection
    sends (CONNECT host:443 ...) and closes it. Given as HTTP(S)_PROXY, it shows any way out."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.seen = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    self.seen.append(conn.recv(4096).split(b"\r\n", 1)[0].decode("latin-1"))
                except OSError as e:
                    self.seen.append(f"(no request line: {e})")

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()


def test_claude_code_headless_turn(qwen35_server, tmp_path, log_on_failure):
    """One headless Claude Code run (its own system prompt and tools, ~20k tokens) against the
    Anthropic route: every request it sends is answered 2xx, and it ends without an API error
    (random weights answer noise: that is fine)."""
    srv = qwen35_server
    log_on_failure(srv)
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "README.md").write_text("A tiny project.\n")
    cli_stderr = []
    proxy = ProxyRecorder()
    env = {
        "ANTHROPIC_BASE_URL": srv.url,
        "ANTHROPIC_API_KEY": "unused",
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_BUG_COMMAND": "1",
        # Everything but loopback goes to a recorder that refuses it: no way out, and we see it.
        "HTTPS_PROXY": proxy.url,
        "HTTP_PROXY": proxy.url,
        "NO_PROXY": "127.0.0.1,localhost",
    }
    options = claude_agent_sdk.ClaudeAgentOptions(
        max_turns=2, cwd=str(work), model="claude-sonnet-4-5", env=env, setting_sources=[],
        system_prompt={"type": "preset", "preset": "claude_code"}, tools={"type": "preset", "preset": "claude_code"},
        stderr=cli_stderr.append)

    messages = []

    async def run():
        async for m in claude_agent_sdk.query(prompt="List the files in this folder.", options=options):
            messages.append(m)

    t0 = time.monotonic()
    error = None
    try:
        asyncio.run(asyncio.wait_for(run(), timeout=300))
    except Exception as e:  # noqa: BLE001  (an error result of the CLI is raised: reported below)
        error = e
    took = time.monotonic() - t0
    proxy.close()
    log = srv.stderr()
    requests_seen = REQUEST_LINE_RE.findall(log)
    print(f"claude code run: {took:.1f} s; requests: {requests_seen}")
    detail = f"error={error!r}\nproxied={proxy.seen}\nmessages={messages!r}\ncli stderr={chr(10).join(cli_stderr)[-3000:]}\nserver log={log[-4000:]}"
    assert error is None, detail
    results = [m for m in messages if isinstance(m, claude_agent_sdk.ResultMessage)]
    assert len(results) == 1, detail
    res = results[0]
    assert res.api_error_status is None, detail
    assert "API Error" not in (res.result or ""), detail
    assert res.subtype in ("success", "error_max_turns"), detail
    assert not res.is_error or res.subtype == "error_max_turns", detail
    for m in messages:
        if isinstance(m, claude_agent_sdk.AssistantMessage):
            assert m.error is None, detail
    posts = [r for r in requests_seen if r[0] == "POST" and r[1].startswith("/v1/messages")]
    assert posts, detail
    bad = [r for r in requests_seen if not r[2].startswith("2")]
    assert not bad, detail
    assert not proxy.seen, detail  # nothing but the Anthropic route on loopback
