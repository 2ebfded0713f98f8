"""A real agent client run headless against `hearth serve`: the OpenAI Agents SDK (its chat
completions model, tracing off) with a function tool, on the default model. The SDK sends
what agents send (tools, tool_choice, parallel_tool_calls, its own model name, streaming);
the run must end with a final answer. Whether the 135M model calls the tool is up to it; when
it does, the SDK runs the tool and sends the result back, and the run still completes."""
import asyncio

import pytest

agents = pytest.importorskip("agents")
openai = pytest.importorskip("openai")

from serve_util import Server  # noqa: E402


@pytest.fixture(scope="module")
def server(hearth_bin, default_model):
    srv = Server(hearth_bin, default_model, "--ctx", 2048, "--threads", "2")
    yield srv
    rc, _ = srv.stop(timeout=8)
    assert rc == 0, srv.stderr()[-3000:]


def test_agents_sdk_run_with_a_function_tool(server):
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"Sunny, 21 C in {city}"

    async def run(stream):
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        try:
            model = agents.OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)
            agent = agents.Agent(name="weather", instructions="Answer briefly. Use tools when useful.",
                                 tools=[get_weather], model=model,
                                 model_settings=agents.ModelSettings(max_tokens=40, temperature=0))
            if stream:
                result = agents.Runner.run_streamed(agent, "What is the weather in Paris?", max_turns=3)
                async for _ in result.stream_events():
                    pass
                return result
            return await agents.Runner.run(agent, "What is the weather in Paris?", max_turns=3)
        finally:
            await client.close()

    agents.set_tracing_disabled(True)
    for stream in (False, True):
        try:
            result = asyncio.run(run(stream))
        except agents.exceptions.MaxTurnsExceeded:
            # The model kept calling the tool: the round trips themselves worked.
            assert calls
            continue
        assert isinstance(result.final_output, str)


def test_agents_sdk_tool_round_trip_with_tool_choice_required(server):
    """tool_choice "required" (ModelSettings) is enforced by a grammar: the first turn is a real
    call of the function tool with arguments of its schema; the SDK runs it, sends the result back
    and (with tool_use_behavior "stop_on_first_tool" the tool's output is the final answer; with
    reset_tool_choice the next turn is free) the run ends with a final answer."""
    calls = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls.append(city)
        return f"Sunny, 21 C in {city}"

    async def run(stream, behavior):
        client = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
        try:
            model = agents.OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client)
            agent = agents.Agent(name="weather", instructions="Answer briefly.", tools=[get_weather], model=model,
                                 tool_use_behavior=behavior, reset_tool_choice=True,
                                 model_settings=agents.ModelSettings(tool_choice="required", max_tokens=60,
                                                                     temperature=0, parallel_tool_calls=False))
            prompt = "What is the weather in Paris?"
            if stream:
                result = agents.Runner.run_streamed(agent, prompt, max_turns=4)
                async for _ in result.stream_events():
                    pass
                return result
            return await agents.Runner.run(agent, prompt, max_turns=4)
        finally:
            await client.close()

    agents.set_tracing_disabled(True)
    for stream in (False, True):
        for behavior in ("stop_on_first_tool", "run_llm_again"):
            calls.clear()
            result = asyncio.run(run(stream, behavior))
            assert len(calls) >= 1 and all(isinstance(c, str) for c in calls), (stream, behavior, calls)
            items = [type(i).__name__ for i in result.new_items]
            assert "ToolCallItem" in items and "ToolCallOutputItem" in items, items
            assert isinstance(result.final_output, str)
            if behavior == "stop_on_first_tool":
                assert result.final_output == f"Sunny, 21 C in {calls[0]}"
            else:
                assert items[-1] == "MessageOutputItem", items
