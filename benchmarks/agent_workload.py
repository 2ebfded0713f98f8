"""An agent-shaped workload for an OpenAI-compatible endpoint: N conversations run at once,
each T turns in order; every turn resends the whole conversation so far plus a new user
message (a tool result of a few lines), so prompts grow and each turn's prompt starts with
the previous one. Streamed, with usage: what comes back per turn is the replica that
answered (X-Hearth-Replica, set by the balancer of deploy/), the prompt and cached tokens,
the time to the first token and the whole time.

Used by tests/e2e/test_replicas.py and benchmarks/replicas_bench.py.
"""
import random
import threading
import time
from dataclasses import dataclass, field

import openai

WORDS = ("alpha build cache deploy error fetch graph handler index json kernel layer module node "
         "output parser query request schema thread update vector worker yaml buffer client debug "
         "engine filter gateway header import loader merge network option packet record socket "
         "token upload value window").split()


@dataclass
class Turn:
    conv: int
    turn: int
    replica: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float = 0.0
    total_s: float = 0.0
    start: float = 0.0  # time.monotonic() when sent
    error: str = ""


@dataclass
class Conversation:
    conv: int
    tag: str
    messages: list = field(default_factory=list)
    turns: list = field(default_factory=list)


def tool_result(rng, lines):
    """A few lines that look like a tool's output (a file listing, a log)."""
    return "\n".join(f"{rng.choice(WORDS)}/{rng.choice(WORDS)}_{rng.randrange(1000)}.py: "
                     + " ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(lines))


def first_messages(conv, tag, system=True):
    rng = random.Random(f"{tag}-{conv}")
    msgs = []
    if system:
        msgs.append({"role": "system", "content": f"You are coding agent {conv} of run {tag}. "
                     f"Project {rng.choice(WORDS)}-{rng.randrange(10**6)}: answer in one short line."})
    msgs.append({"role": "user", "content": f"Task {tag}-{conv}: look at the repository.\n" + tool_result(rng, 3)})
    return msgs


def run_turn(client, conv, turn, messages, max_tokens, headers=None, timeout=120):
    """One streamed chat turn; returns (Turn, reply text). Errors are recorded, not raised."""
    t = Turn(conv=conv, turn=turn, start=time.monotonic())
    text = []
    try:
        raw = client.chat.completions.with_raw_response.create(
            model="default", messages=messages, max_tokens=max_tokens, temperature=0, seed=conv,
            stream=True, stream_options={"include_usage": True}, extra_headers=headers or {}, timeout=timeout)
        t.replica = raw.headers.get("x-hearth-replica", "")
        finished = False
        for chunk in raw.parse():
            if chunk.choices:
                c = chunk.choices[0]
                if c.delta and c.delta.content:
                    if not t.ttft_s:
                        t.ttft_s = time.monotonic() - t.start
                    text.append(c.delta.content)
                if c.finish_reason:
                    finished = True
            if chunk.usage:
                t.prompt_tokens = chunk.usage.prompt_tokens
                t.completion_tokens = chunk.usage.completion_tokens
                details = chunk.usage.prompt_tokens_details
                t.cached_tokens = (details.cached_tokens or 0) if details else 0
        if not finished:
            t.error = "the stream ended without a finish_reason"
    except openai.APIStatusError as e:
        t.replica = t.replica or e.response.headers.get("x-hearth-replica", "")
        t.error = f"{type(e).__name__}: {e}"
    except (openai.APIError, openai.APIConnectionError) as e:
        t.error = f"{type(e).__name__}: {e}"
    except Exception as e:  # the transport (httpx) when the connection breaks mid-stream
        t.error = f"{type(e).__name__}: {e}"
    t.total_s = time.monotonic() - t.start
    if not t.ttft_s:
        t.ttft_s = t.total_s
    return t, "".join(text)


def run_conversation(client, conv, tag, turns, max_tokens, retries=0, headers=None, on_turn=None, system=True):
    """Runs one conversation; a failed turn is sent again up to `retries` times (as an agent
    would). Returns the Conversation with every attempt in .turns."""
    c = Conversation(conv=conv, tag=tag, messages=first_messages(conv, tag, system))
    rng = random.Random(f"{tag}-{conv}-turns")
    for k in range(turns):
        for attempt in range(retries + 1):
            t, reply = run_turn(client, conv, k, c.messages, max_tokens, headers)
            c.turns.append(t)
            if on_turn:
                on_turn(t)
            if not t.error:
                break
        else:
            return c  # gave up on this conversation
        c.messages.append({"role": "assistant", "content": reply or "ok"})
        c.messages.append({"role": "user", "content": f"Step {k + 1} result:\n" + tool_result(rng, 2)})
    return c


def run_workload(base_url, conversations=16, turns=6, max_tokens=8, tag="w", retries=0, on_turn=None,
                 session_header=False, api_key="none"):
    """Every conversation on its own thread; returns (list of Conversation, seconds)."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    out = [None] * conversations

    def one(i):
        headers = {"X-Session-Id": f"{tag}-{i}"} if session_header else None
        out[i] = run_conversation(client, i, tag, turns, max_tokens, retries, headers, on_turn)

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(conversations)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out, time.monotonic() - t0


def reuses_previous(turns, block=16):
    """Per successful turn after the first: whether its cached prefix covers the previous
    turn's whole prompt (to a block: the cache keeps whole blocks)."""
    ok = [t for t in turns if not t.error]
    return [cur.cached_tokens >= prev.prompt_tokens - block for prev, cur in zip(ok, ok[1:])]
