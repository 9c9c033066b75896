"""A Python agent runs its whole LLM loop against Engram (DESIGN §4):
PrepareRequest -> "LLM" -> Ingest the answer with usage -> Ingest tool
results -> PrepareRequest ... for 20 turns, in every render format. Every
payload Engram hands out must pass the provider's validator."""

import json
import os
import sys

import grpc
import pytest
from google.protobuf import struct_pb2

from engram.v1 import service_pb2 as svc
from engram.v1 import service_pb2_grpc
from engram.v1 import types_pb2 as types

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "third_party", "provider-schemas"))
import validate  # noqa: E402

FORMATS = {
    "RENDER_FORMAT_OPENAI_CHAT": "openai-chat",
    "RENDER_FORMAT_OPENAI_RESPONSES": "openai-responses",
    "RENDER_FORMAT_ANTHROPIC_MESSAGES": "anthropic-messages",
    "RENDER_FORMAT_GEMINI": "gemini",
}
TURNS = 20


def fake_llm(turn, payload):
    """Deterministic stand-in for the model: on even turns it calls tools
    (two in parallel on every fourth turn), then answers."""
    assert payload, "a rendered payload was requested"
    if turn % 2 == 0:
        calls = [("get_weather", {"city": f"City{turn}"})]
        if turn % 4 == 0:
            calls.append(("get_time", {"tz": "UTC"}))
        return None, calls
    return f"Answer for turn {turn}.", []


def run_tool(name, args):
    if name == "get_weather":
        return {"city": args["city"], "temp_c": 12}
    return "12:00"


def check(fmt, payload, where):
    errors, warnings = validate.validate(fmt, json.loads(payload))
    problems = errors + warnings
    assert not problems, f"{where}: {problems}"


@pytest.fixture
def client(engramd):
    """The generated stub itself: this test speaks the proto-level API."""
    channel = grpc.insecure_channel(engramd)
    yield service_pb2_grpc.MemoryServiceStub(channel)
    channel.close()


@pytest.mark.parametrize("render_format", list(FORMATS))
def test_twenty_turns_with_tools(client, render_format):
    agent = f"py-loop-{render_format.lower().replace('_', '-')}"
    fmt = FORMATS[render_format]
    for turn in range(1, TURNS + 1):
        resp = client.PrepareRequest(svc.PrepareRequestRequest(
            agent_id=agent,
            system_prompt="You are a helpful assistant with weather and time tools.",
            user_input=types.TraceEvent(content=f"Question {turn}", event_id=f"{agent}-u{turn}"),
            model="gpt-4o-mini",
            render_format=render_format,
        ))
        assert resp.turn_id == f"turn_{turn:04d}"
        check(fmt, resp.rendered_payload_json, f"turn {turn} prompt")
        text, calls = fake_llm(turn, resp.rendered_payload_json)
        usage = types.Usage(prompt_tokens=resp.estimated_prompt_tokens, completion_tokens=30,
                            total_tokens=resp.estimated_prompt_tokens + 30)
        if calls:
            events = []
            for i, (name, args) in enumerate(calls):
                s = struct_pb2.Struct()
                s.update(args)
                events.append(types.TraceEvent(trace_type=types.TRACE_TYPE_TOOL_CALL,
                                               tool_call_id=f"call_{turn}_{i}", tool_name=name, tool_args=s))
            out = client.Ingest(svc.IngestRequest(agent_id=agent, events=events, usage=usage, model="gpt-4o-mini"))
            assert all(t.turn_id == resp.turn_id for t in out.traces)
            results = []
            for i, (name, args) in enumerate(calls):
                v = struct_pb2.Value()
                v.string_value = json.dumps(run_tool(name, args))
                results.append(types.TraceEvent(trace_type=types.TRACE_TYPE_TOOL_RESULT,
                                                tool_call_id=f"call_{turn}_{i}", tool_result=v))
            client.Ingest(svc.IngestRequest(agent_id=agent, events=results))
            cont = client.PrepareRequest(svc.PrepareRequestRequest(
                agent_id=agent, model="gpt-4o-mini", render_format=render_format))
            check(fmt, cont.rendered_payload_json, f"turn {turn} continuation")
            text = f"Done with tools for turn {turn}."
        client.Ingest(svc.IngestRequest(
            agent_id=agent, model="gpt-4o-mini", usage=usage,
            events=[types.TraceEvent(trace_type=types.TRACE_TYPE_ASSISTANT, content=text)]))
    stats = client.GetContextStats(svc.GetContextStatsRequest(agent_id=agent))
    assert stats.turns == TURNS
    # system + per turn: user + answer, plus call step + results on even turns
    calls = sum(2 if t % 4 == 0 else 1 for t in range(2, TURNS + 1, 2))
    assert stats.messages == 1 + 2 * TURNS + (TURNS // 2) + calls
    assert not stats.compaction_required
