"""EngramSession (the OpenAI Agents SDK's Session over Engram) against the
real engramd: the SDK's session contract, retries, compaction, auth, and a
real Runner whose model is an in-process fake."""

import asyncio
import copy
import hashlib
import json
import os
import sys
import threading

import grpc
import pytest
from agents import Agent, RunConfig, Runner, SessionSettings, function_tool
from agents.items import ModelResponse
from agents.memory import Session
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (ResponseFunctionToolCall, ResponseOutputMessage,
                                    ResponseOutputText)

from engram.v1 import types_pb2 as types
from engram_client import EngramClient
from engram_client.agents_session import EngramSession

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "third_party", "provider-schemas"))
import validate  # noqa: E402

MODEL = "gpt-4.1"
IMAGE = {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"}
TOOL_HISTORY = [
    {"role": "user", "content": "What is the weather?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather",
     "arguments": '{"city":"Paris","days":2}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {"role": "assistant", "content": "It is sunny."},
]


def run(coro):
    return asyncio.run(coro)


def kinds(engram, agent):
    """The agent's stored traces (not compacted) as (type, text or call id)."""
    return [(t.trace_type, t.content or t.tool_call_id)
            for t in engram.retrieve(agent, raw_tail_turns=100).raw_tail]


def assert_valid_responses_input(items):
    errors, _ = validate.validate("openai-responses", {"model": MODEL, "input": items})
    assert errors == [], errors


def test_session_contract_add_get_limit_pop_clear(engramd):
    """The expectations of the SDK's own session tests hold."""
    with EngramClient(engramd) as engram:
        session = EngramSession("sdk-contract", engram, model=MODEL)
        other = EngramSession("sdk-other", engram, model=MODEL)
        assert isinstance(session, Session)

        async def scenario():
            assert await session.get_items() == []
            assert await session.pop_item() is None
            items = [{"role": "user", "content": "Hello"},
                     {"role": "assistant", "content": "Hi there!"},
                     {"role": "user", "content": "How are you?"}]
            await session.add_items(items)
            await other.add_items([{"role": "user", "content": "Other conversation"}])
            assert await session.get_items() == items, "in order, as added"
            assert await session.get_items(limit=2) == items[-2:], "the latest, in order"
            assert await session.get_items(limit=0) == []
            assert await session.get_items(limit=10) == items

            assert await session.pop_item() == items[2]
            assert await session.get_items() == items[:2], "popped means gone"
            assert await session.pop_item() == items[1]
            assert await session.pop_item() == items[0]
            assert await session.pop_item() is None
            assert await session.get_items() == []
            assert await other.get_items() == [{"role": "user", "content": "Other conversation"}]

            # Tool calls and results keep their pairing and order.
            await session.add_items(TOOL_HISTORY)
            assert await session.get_items() == TOOL_HISTORY
            assert_valid_responses_input(await session.get_items())
            assert await session.pop_item() == TOOL_HISTORY[3]
            # Engram forgets a result with its call; the session stores the
            # call again, so only the result is gone.
            assert await session.pop_item() == TOOL_HISTORY[2]
            assert kinds(engram, "sdk-contract")[-1] == (types.TRACE_TYPE_TOOL_CALL, "call_1")
            assert await session.get_items() == TOOL_HISTORY[:2]
            assert await session.pop_item() == TOOL_HISTORY[1]
            await session.add_items(TOOL_HISTORY[1:])
            assert await session.get_items() == TOOL_HISTORY, "the call's id is free again"

            await session.clear_session()
            assert await session.get_items() == []
            assert "sdk-contract" not in list(engram.list_agents()), "DeleteAgent without auth"
            assert await other.get_items() != []

        run(scenario())


def test_limit_from_session_settings_and_shapes_engram_keeps(engramd):
    with EngramClient(engramd) as engram:
        session = EngramSession("sdk-shapes", engram, model=MODEL,
                                session_settings=SessionSettings(limit=2))
        added = [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Look at this"},
                IMAGE]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "developer", "content": "Be terse."},
            {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "A cat.", "annotations": [],
                          "logprobs": []}]},
            {"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "zoom",
             "arguments": '{"z": 2.0, "a": "é"}', "status": "completed"},
            {"type": "function_call_output", "call_id": "c1",
             "output": [{"type": "input_text", "text": "zoomed"}]},
            {"type": "function_call", "call_id": "c2", "name": "noargs", "arguments": ""},
            {"type": "function_call_output", "call_id": "c2", "output": "done"},
            {"type": "function_call", "call_id": "c3", "name": "broken", "arguments": "{oops"},
        ]
        expected = [
            {"role": "user", "content": [
                {"type": "input_text", "text": "Look at this"},
                IMAGE]},
            {"role": "assistant", "content": "A cat."},
            {"type": "function_call", "call_id": "c1", "name": "zoom",
             "arguments": '{"a":"é","z":2}'},
            {"type": "function_call_output", "call_id": "c1",
             "output": '[{"text":"zoomed","type":"input_text"}]'},
            {"type": "function_call", "call_id": "c2", "name": "noargs", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c2", "output": "done"},
            # c3 waits for its result: Engram's placeholder answer is left out.
            {"type": "function_call", "call_id": "c3", "name": "broken", "arguments": "{oops"},
        ]

        async def scenario():
            await session.add_items(added)
            assert await session.get_items(limit=-1) == expected
            assert await session.get_items() == expected[-2:], "session_settings.limit"
            assert_valid_responses_input(expected[:-1])
            assert [t for t, _ in kinds(engram, "sdk-shapes")] == [
                types.TRACE_TYPE_USER, types.TRACE_TYPE_ASSISTANT] + [
                types.TRACE_TYPE_TOOL_CALL, types.TRACE_TYPE_TOOL_RESULT] * 2 + [
                types.TRACE_TYPE_TOOL_CALL], "reasoning and developer items are not stored"
            # What pop returns is what get_items showed last.
            for _ in range(len(expected)):
                shown = (await session.get_items(limit=-1))[-1]
                assert await session.pop_item() == shown
            assert await session.get_items(limit=-1) == []

        run(scenario())


class LosesAnswers(EngramClient):
    """Ingests, then reports a failure: the answer was lost on the way."""

    lose = 0

    def ingest(self, *args, **kwargs):
        stored = super().ingest(*args, **kwargs)
        if self.lose:
            self.lose -= 1
            raise ConnectionError("the answer was lost")
        return stored


def test_a_retried_add_items_stores_nothing_twice(engramd):
    batch = [{"role": "user", "content": "yes"}, {"role": "assistant", "content": "Noted."}]
    with LosesAnswers(engramd) as engram:
        session = EngramSession("sdk-retry", engram, model=MODEL)

        async def scenario():
            await session.add_items([{"role": "user", "content": "Shall we?"},
                                     {"role": "assistant", "content": "Say yes."}])
            engram.lose = 1
            with pytest.raises(ConnectionError):
                await session.add_items(batch)  # stored, but the caller cannot know
            await session.add_items(batch)
            # So does another process retrying it (event ids are not random).
            elsewhere = EngramSession("sdk-retry", engramd, model=MODEL)
            await elsewhere.add_items(batch)
            elsewhere.close()
            texts = [i["content"] for i in await session.get_items()]
            assert texts == ["Shall we?", "Say yes.", "yes", "Noted."]
            assert all(t.event_id.startswith("oa-") for t in
                       engram.retrieve("sdk-retry", raw_tail_turns=10).raw_tail)
            # The same words later in the conversation are new items.
            await session.add_items([{"role": "user", "content": "Again?"}])
            await session.add_items(batch)
            texts = [i["content"] for i in await session.get_items()]
            assert texts == ["Shall we?", "Say yes.", "yes", "Noted.", "Again?", "yes", "Noted."]

        run(scenario())


class GatedClient(EngramClient):
    """prepare_request waits for the event loop to open a gate: it can only
    if the call does not hold the loop."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()

    def prepare_request(self, *args, **kwargs):
        assert self.gate.wait(timeout=10), "the event loop was blocked during the call"
        return super().prepare_request(*args, **kwargs)


def test_calls_do_not_block_the_event_loop(engramd):
    with GatedClient(engramd) as engram:
        session = EngramSession("sdk-loop", engram, model=MODEL)

        async def scenario():
            await session.add_items([{"role": "user", "content": "hi"}])
            asyncio.get_running_loop().call_soon(engram.gate.set)
            assert await session.get_items() == [{"role": "user", "content": "hi"}]

        run(scenario())


class FakeModel(Model):
    """Stands in for the LLM: asks for get_weather on a question, answers
    from the tool's result. Keeps every input it was given."""

    def __init__(self):
        self.inputs = []

    async def get_response(self, system_instructions, input, model_settings, tools,
                           output_schema, handoffs, tracing, *, previous_response_id,
                           conversation_id, prompt):
        self.inputs.append(copy.deepcopy(input))
        n, last = len(self.inputs), input[-1]
        if last.get("type") == "function_call_output":
            out = ResponseOutputMessage(
                id=f"msg_{n}", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=f"It is {last['output']}.",
                                            annotations=[])])
        else:
            out = ResponseFunctionToolCall(id=f"fc_{n}", type="function_call", call_id=f"call_{n}",
                                           name="get_weather", status="completed",
                                           arguments=json.dumps({"city": "Paris"}))
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"12 C in {city}"


def ask(model, session, question):
    agent = Agent(name="weather", instructions="Answer briefly.", model=model, tools=[get_weather])
    result = Runner.run(agent, question, session=session,
                        run_config=RunConfig(tracing_disabled=True))
    return run(result).final_output


def test_runner_reads_and_writes_its_history_through_engram(engramd):
    with EngramClient(engramd) as engram:
        model, session = FakeModel(), EngramSession("sdk-runner", engram, model=MODEL)
        assert ask(model, session, "Weather in Paris?") == "It is 12 C in Paris."
        assert model.inputs[0] == [{"role": "user", "content": "Weather in Paris?"}]
        assert [t for t, _ in kinds(engram, "sdk-runner")] == [
            types.TRACE_TYPE_USER, types.TRACE_TYPE_TOOL_CALL, types.TRACE_TYPE_TOOL_RESULT,
            types.TRACE_TYPE_ASSISTANT], "the run's items are stored in Engram"

        history = run(session.get_items())
        assert history == [
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather",
             "arguments": '{"city":"Paris"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "12 C in Paris"},
            {"role": "assistant", "content": "It is 12 C in Paris."}]
        assert ask(model, session, "And in Lyon?") == "It is 12 C in Paris."
        # The next run's first model call starts with Engram's history.
        assert model.inputs[2] == history + [{"role": "user", "content": "And in Lyon?"}]
        assert len(run(session.get_items())) == 8


def test_a_long_conversation_comes_back_compacted(start_engramd):
    addr = start_engramd(ENGRAM__POLICY__RAW_TAIL_TURNS="1")
    with EngramClient(addr) as engram:
        session = EngramSession("sdk-long", engram, model=MODEL, recall=False)

        async def conversation():
            for n in range(6):
                await session.add_items([{"role": "user", "content": f"My locker {n} is blue {n}"},
                                         {"role": "assistant", "content": f"Locker {n} noted."}])
        run(conversation())
        assert len(run(session.get_items())) == 12
        assert engram.compact("sdk-long").performed

        items = run(session.get_items())
        memory = items[0]
        assert memory["role"] == "system" and "[MEMORY:EPISODIC]" in memory["content"]
        assert "My locker 0 is blue 0" in memory["content"], "the old turns as a summary"
        texts = [i["content"] for i in items[1:]]
        assert "My locker 0 is blue 0" not in texts and "Locker 5 noted." in texts
        assert len(items) < 12
        assert_valid_responses_input(items)
        # With recall (the server's default), memories relevant to the latest
        # question ride on it.
        latest = run(EngramSession("sdk-long", engram, model=MODEL).get_items())[-2]
        assert latest["content"].startswith("My locker 5 is blue 5\n\n[MEMORY:RECALLED]")
        assert "My locker 0 is blue 0" in latest["content"]

        # A Runner's model gets the summary, not the old turns.
        model = FakeModel()
        ask(model, session, "Which lockers did I mention?")
        assert model.inputs[0][0] == memory
        assert not any(i.get("content") == "My locker 0 is blue 0" for i in model.inputs[0])


@pytest.mark.parametrize("scope", ["agents", "users"])
def test_tokens_that_may_not_delete_agents_clear_by_forgetting(start_engramd, tmp_path, scope):
    token = f"sdk-{scope}-token-0123456789"
    tokens = tmp_path / "tokens.toml"
    tokens.write_text('[[tokens]]\nname = "sdk"\ntoken_sha256 = "%s"\n%s = ["%s"]\n' % (
        hashlib.sha256(token.encode()).hexdigest(), scope, "sdk-*" if scope == "agents" else "u-*"))
    addr = start_engramd(ENGRAM__AUTH__TOKENS_FILE=str(tokens), ENGRAM__POLICY__RAW_TAIL_TURNS="1")
    # A token scoped to users reaches the conversations bound to its users.
    session = EngramSession("sdk-scoped", addr, token=token, model=MODEL,
                            user_id="u-1" if scope == "users" else "")
    try:
        with EngramClient(addr, token=token) as engram:
            def secrets():
                return engram.search_history("sdk-scoped", "Secret", mode="match-all-words").matches

            async def scenario():
                # A conversation nothing was written to yet: nothing to do.
                assert await session.get_items() == []
                assert await session.pop_item() is None
                await session.clear_session()
                for n in range(4):
                    await session.add_items(
                        [{"role": "user", "content": f"Secret {n}"}] + TOOL_HISTORY[1:3]
                        if n == 0 else [{"role": "user", "content": f"Secret {n}"},
                                        {"role": "assistant", "content": f"Kept {n}."}])
                assert engram.compact("sdk-scoped").performed
                assert len(secrets()) == 4, "stored, and archived by the compaction"
                with pytest.raises(grpc.RpcError) as err:
                    engram.delete_agent("sdk-scoped")
                assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
                await session.clear_session()
                assert await session.get_items() == []
                assert kinds(engram, "sdk-scoped") == []
                assert secrets() == [], "the archived turns too"
                await session.add_items([{"role": "user", "content": "A new start"}])
                assert await session.get_items() == [{"role": "user", "content": "A new start"}]

            run(scenario())
    finally:
        session.close()
