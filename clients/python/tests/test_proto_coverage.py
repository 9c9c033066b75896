"""Every request field of the API can be set through the client.

The fields come from proto/engram/v1/*.proto itself, not from the generated
stubs (an installed package could be older than the protos). Each helper is
called with every option set to a value that is not the field's default,
through a stub that records the request instead of sending it; a field of
the proto that no call sets fails here, naming it: add it to the helper
(client.py) and to the calls below."""

import collections
import glob
import os
import re

from engram.v1 import facts_pb2 as facts
from engram.v1 import memory_pb2 as memory
from engram.v1 import service_pb2 as svc

from engram_client import EngramClient, assistant, tool_call, tool_result, user

PROTO_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "proto")

# Facts belong to an agent or a user: the server refuses the global scope
# for them, so their helpers have no way to ask for it.
NOT_ASKABLE = {rpc: {"MemoryScope.global"} for rpc in (
    "AddMemories", "ListMemories", "GetMemory", "GetMemoryHistory", "UpdateMemory", "DeleteMemory",
    "ExportMemory")}

# Message types a helper covers on its own (TraceEvent: the event helpers
# below), so a request carrying one is not asked to set all of its fields.
COVERED_APART = {"TraceEvent"}


def parse_protos(proto_dir=PROTO_DIR):
    """({message: {field: type}}, {rpc: request message}) from the .proto files."""
    messages, rpcs = {}, {}
    paths = sorted(glob.glob(os.path.join(proto_dir, "engram", "v1", "*.proto")))
    assert paths, f"no .proto files under {proto_dir}"
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"//[^\n]*", "", f.read())
        for rpc, request in re.findall(r"\brpc\s+(\w+)\s*\(\s*(?:stream\s+)?([\w.]+)\s*\)", text):
            rpcs[rpc] = request
        for name, body in top_level_messages(text):
            fields = re.findall(
                r"^\s*(?:optional\s+|repeated\s+)?(map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+",
                body, re.M)
            messages[name] = {field: ftype for ftype, field in fields}
    return messages, rpcs


def top_level_messages(text):
    """(name, body) of each top-level `message` (oneof bodies included)."""
    out = []
    for m in re.finditer(r"^(message|enum|service)\s+(\w+)\s*\{", text, re.M):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[m.end():i - 1]
        if m.group(1) == "message":
            assert not re.search(r"\b(message|enum)\s+\w+\s*\{", body), \
                f"nested types in {m.group(2)}: teach this parser about them"
            out.append((m.group(2), body))
    return out


def unset_fields(name, msg, messages):
    """The proto fields of message `name` that `msg` leaves unset, following
    message fields of our own types."""
    present = {f.name for f, _ in msg.ListFields()}
    missing = set()
    for field, ftype in messages[name].items():
        if field not in present:
            missing.add(f"{name}.{field}")
        elif ftype in messages and ftype not in COVERED_APART:
            value = getattr(msg, field)
            for item in (value if hasattr(value, "__len__") and not hasattr(value, "ListFields") else [value]):
                missing |= unset_fields(ftype, item, messages)
    return missing


class Recorder:
    """Stands in for the generated stub: keeps each request, answers an empty
    response (ListAgents: a second page, so the page token is followed)."""

    def __init__(self):
        self.requests = collections.defaultdict(list)

    def __getattr__(self, method):
        def call(request, **_):
            if hasattr(request, "ListFields"):
                self.requests[method].append(request)
            else:
                # A stream of requests (ImportMemory).
                self.requests[method].extend(request)
            # Named by the service, not always after the method (ForgetTurn
            # and ForgetEvents answer a ForgetResponse).
            service = svc.DESCRIPTOR.services_by_name["MemoryService"]
            name = service.methods_by_name[method].output_type.name
            response = (getattr(svc, name, None) or getattr(memory, name, None)
                        or getattr(facts, name))()
            if method in ("ListAgents", "ListUsers", "ListMemories", "ListCompactions") and len(self.requests[method]) == 1:
                response.next_page_token = "page-2"
            if method == "ExportMemory":
                return iter([response])  # a stream of answers
            return response
        return call


def call_every_helper(engram):
    """Each RPC's helper with every option set (none to its default)."""
    engram.ingest("a", [user("hi")], model="m",
                  usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
                  user_id="u")
    engram.prepare_request("a", user_input="hi", system_prompt="s", model="m",
                           render_format="gemini", max_output_tokens=5, force_compaction=True,
                           recall=False, recall_max_tokens=7, user_id="u", strategy="trim",
                           recall_as_of=8.0)
    engram.prepare_request("a", model="m", preview=True)
    engram.compact("a", focus="f", strategy="trim")
    engram.retrieve("a", "q", max_episodic=1, max_semantic=2, raw_tail_turns=3,
                    include_tool_interactions=True, max_recalled=4, context_messages=5,
                    wait_for_index_ms=6, user_id="u", as_of=7.0)
    engram.search_history("a", "q", limit=1, page_token="p", mode="match-all-words",
                          trace_types=["user"], from_turn_id="turn_0001",
                          to_turn_id="turn_0002", from_ts=1.0, to_ts=2.0, context_messages=3,
                          wait_for_index_ms=4, user_id="u", as_of=5.0)
    engram.context_stats("a", model="m")
    list(engram.list_compactions("a", page_size=1))
    list(engram.list_agents(page_size=1, user_id="u", id_contains="a"))
    list(engram.list_users(page_size=1))
    engram.delete_agent("a")
    engram.fork_agent("a", "b")
    engram.delete_user("u")
    engram.consolidate_user("u")
    engram.list_consolidations("u", page_size=1)
    # Each scope once: a oneof's fields count when any call sets them.
    for scope in (dict(agent_id="a"), dict(user_id="u"), dict(global_scope=True)):
        engram.list_blocks(**scope)
        engram.get_block("l", include_history=True, **scope)
        engram.delete_block("l", expected_version=1, **scope)
    engram.put_block("l", "v", agent_id="a", format="json", description="d", limit_chars=9,
                     read_only=True, expected_version=0, agent_user_id="u")
    engram.put_block("l", "v", user_id="u")
    engram.put_block("l", "v", global_scope=True)
    engram.edit_block("l", agent_id="a", append="x", expected_version=1, agent_user_id="u")
    engram.edit_block("l", user_id="u", replace=("x", "y"))
    engram.edit_block("l", global_scope=True, insert=(1, "z"))
    engram.edit_block("l", agent_id="a", json_merge_patch={"k": 1})
    for scope in (dict(agent_id="a"), dict(user_id="u")):
        engram.add_memories([{"text": "t", "tags": ["x"], "pinned": True, "expires_at": 9.0,
                              "metadata": {"k": "v"}, "valid_from": 8.0}], **scope)
        list(engram.list_memories(query="q", tags=["x"], include_superseded=True,
                                  include_expired=True, page_size=5, as_of=7.0, **scope))
        engram.get_memory("m", **scope)
        engram.memory_history("m", **scope)
        engram.update_memory("m", text="t", tags=["x"], pinned=True, expires_at=9.0,
                             metadata={"k": "v"}, expected_version=2, valid_from=6.0, **scope)
        engram.delete_memory("m", expected_version=3, **scope)
    list(engram.list_memories(user_id="u", source_agent_id="a"))
    engram.forget_turn("a", "turn_0001")
    engram.forget_events("a", ["e1"])
    for scope in (dict(agent_id="a"), dict(user_id="u")):
        list(engram.export_memory(**scope))
    engram.import_memory([b"{}\n", b"{}\n"], replace=True)


EVERY = dict(event_id="e1", ts=1683532800.0, turn_id="turn_0001", source_event="cli",
             correlation_id="c1", tags=["t"])
MEDIA = {"images": ["https://example.com/a.png"], "audio": ["https://example.com/a.mp3"],
         "video": ["https://example.com/a.mp4"]}
TOOL_FIELDS = {"tool_name", "tool_call_id", "tool_args", "tool_result", "tool_error"}
# Each event helper with every option set, and the TraceEvent fields that
# do not belong to its kind of event.
EVENT_HELPERS = {
    "user": (lambda: user("hi", name="Caroline", media=MEDIA, **EVERY), TOOL_FIELDS),
    "assistant": (lambda: assistant("hi", name="Mel", media=MEDIA, **EVERY), TOOL_FIELDS),
    "tool_call": (lambda: tool_call("c1", "get_weather", {"city": "Paris"}, **EVERY),
                  {"content", "media", "name", "tool_result", "tool_error"}),
    "tool_result": (lambda: tool_result("c1", {"temp_c": 18}, name="get_weather",
                                        error="failed", **EVERY),
                    {"content", "media", "name", "tool_args"}),
}


def test_the_parser_reads_the_protos():
    messages, rpcs = parse_protos()
    assert rpcs["PrepareRequest"] == "PrepareRequestRequest"
    assert messages["PrepareRequestRequest"]["user_input"] == "TraceEvent"
    assert "wait_for_index_ms" in messages["SearchHistoryRequest"]
    assert len(messages["TraceEvent"]) >= 15
    # The parser misses no rpc and no field: the generated descriptors agree.
    service = svc.DESCRIPTOR.services_by_name["MemoryService"]
    assert set(rpcs) == {m.name for m in service.methods}
    for method in service.methods:
        generated = method.input_type
        assert set(messages[rpcs[method.name]]) == {f.name for f in generated.fields}


def test_every_request_field_has_a_helper():
    messages, rpcs = parse_protos()
    engram = EngramClient("127.0.0.1:1")
    engram.stub = Recorder()
    try:
        call_every_helper(engram)
    finally:
        engram.close()
    missing = set()
    for rpc, request in sorted(rpcs.items()):
        sent = engram.stub.requests.get(rpc)
        assert sent, f"EngramClient has no helper for {rpc}"
        # A field counts when any of the helper's calls set it.
        missing |= set.intersection(*(unset_fields(request, r, messages) for r in sent)) \
            - NOT_ASKABLE.get(rpc, set())
    assert not missing, f"request fields the Python client cannot set: {sorted(missing)}"


def test_every_event_field_has_a_helper():
    messages, _ = parse_protos()
    missing = set()
    for helper, (make, other_kinds) in EVENT_HELPERS.items():
        unset = unset_fields("TraceEvent", make(), messages)
        missing |= {f"{helper}(): {f}" for f in unset
                    if f.split(".", 1)[0] != "TraceEvent" or f.split(".", 1)[1] not in other_kinds}
    assert not missing, f"TraceEvent fields the event helpers cannot set: {sorted(missing)}"
