"""EngramSession: Engram as the session memory of the OpenAI Agents SDK.

    from agents import Agent, Runner
    from engram_client.agents_session import EngramSession

    session = EngramSession("conv-42", "127.0.0.1:50051", model="gpt-4.1")
    result = await Runner.run(agent, "What did we decide yesterday?", session=session)

It implements the SDK's `Session` protocol (`get_items`, `add_items`,
`pop_item`, `clear_session`) over Engram, which owns the transcript:

- `add_items` stores the items as Engram events, each with an event id
  derived from the item, its place in the batch and the trace it follows, so
  sending the same batch again right after it was stored (a retry after a
  lost answer, from any process) stores nothing new. A batch exactly equal
  to the one just before it is therefore taken as that retry.
- `get_items` is Engram's prompt for the conversation, rendered as OpenAI
  Responses input items: once old turns are compacted they come back as a
  leading system item with their summary and facts, not one by one. Recall
  (`recall=None` follows the server's setting) attaches memories relevant
  to the latest stored user message to it; the Runner reads history before
  it stores the new question, so that is the previous question.
- `pop_item` forgets the latest event (ForgetEvents) and returns it.
- `clear_session` deletes the agent (DeleteAgent, an admin token); with a
  token scoped to agents it forgets every turn instead (ForgetTurn), which
  erases the transcript and the summaries and facts drawn from it but keeps
  the agent's memory blocks and the facts clients added.

The session id is the Engram agent id (1-128 of `[A-Za-z0-9._-]`).

Items are stored as Engram models them, and come back in one shape per kind:

- user messages (text, `input_text` parts, `input_image` URLs): as
  `{"role": "user", "content": text}` (parts when there are images);
- assistant messages (text, `output_text` and `refusal` parts): as
  `{"role": "assistant", "content": text}`;
- `function_call`: the same keys, `arguments` as compact JSON with sorted
  keys; `function_call_output`: the same keys, a non-text output as JSON text;
- reasoning, system and developer messages, hosted-tool and other items are
  not stored.

Provider item ids and `status` are not kept (an output message without its
id is not valid Responses input, so assistant text comes back as an easy
input message, as Engram renders it). Reasoning is skipped because
replaying it needs the provider's own ids or encrypted content; system and
developer text belongs to the Agent's instructions. A `function_call` whose
output has not arrived is left out of `get_items` (Engram's prompt answers it
with a placeholder; the SDK drops unanswered calls from history anyway).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
from typing import TYPE_CHECKING, Any, Optional, Union

import grpc
from google.protobuf import json_format

from engram.v1 import types_pb2 as types

from .client import EngramClient, assistant, tool_call, tool_result, user

if TYPE_CHECKING:  # the SDK is needed to run agents, not to import this module
    from agents import SessionSettings, TResponseInputItem

log = logging.getLogger(__name__)

# What Engram's prompt shows for a tool call whose result it does not have yet.
PENDING_RESULT = "[tool result not available yet]"
# Tool arguments that are not a JSON object are kept as a string under this key.
RAW_ARGUMENTS = "_raw_arguments"
# A section header of Engram's memory snapshot, e.g. [MEMORY:EPISODIC].
_HEADER = re.compile(r"\[[A-Z][A-Z :]*\]")

_USER, _ASSISTANT = types.TRACE_TYPE_USER, types.TRACE_TYPE_ASSISTANT
_CALL, _RESULT = types.TRACE_TYPE_TOOL_CALL, types.TRACE_TYPE_TOOL_RESULT


class EngramSession:
    """An OpenAI Agents SDK session whose history is an Engram agent.

    `client` is an EngramClient (left open by close()) or a target address
    (a client is made with `token`). `model` names the model the prompt is
    rendered and budgeted for (default: the SDK's default model). `user_id`
    ties the conversation to its user (cross-conversation recall, tokens
    scoped by user). `recall` turns Engram's recall on or off (None: the
    server's setting). `session_settings.limit` is the default `limit` of
    get_items.

    Every call runs the blocking gRPC client in a worker thread, one at a
    time per session (so a read and the write it decides stay together).
    """

    session_settings: Optional["SessionSettings"] = None

    def __init__(self, session_id: str, client: Union[EngramClient, str] = "127.0.0.1:50051", *,
                 token: Optional[str] = None, model: Optional[str] = None, user_id: str = "",
                 recall: Optional[bool] = None,
                 session_settings: Union["SessionSettings", dict, None] = None):
        self.session_id = session_id
        if isinstance(session_settings, dict):
            from agents import SessionSettings
            session_settings = SessionSettings(**session_settings)
        self.session_settings = session_settings
        if isinstance(client, EngramClient):
            self.client, self._owns_client = client, False
        else:
            self.client, self._owns_client = EngramClient(client, token=token), True
        if model is None:
            from agents.models import get_default_model
            model = get_default_model()
        self.model = model
        self.user_id = user_id
        self.recall = recall
        # A threading lock, not an asyncio one: Runner.run_sync gives each run
        # its own event loop, and the work happens in worker threads anyway.
        self._lock = threading.Lock()
        self._skipped_kinds: set = set()

    def close(self) -> None:
        """Closes the client if this session made it."""
        if self._owns_client:
            self.client.close()

    # The Session protocol.

    async def get_items(self, limit: Optional[int] = None) -> list["TResponseInputItem"]:
        """What the model should see, oldest first; the last `limit` items
        when given (0: none; a negative limit: all)."""
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        return await asyncio.to_thread(self._get_items, limit)

    async def add_items(self, items: list["TResponseInputItem"]) -> None:
        """Stores the items Engram keeps (see the module's table), in one
        all-or-nothing Ingest."""
        await asyncio.to_thread(self._add_items, [_as_dict(item) for item in items])

    async def pop_item(self) -> Optional["TResponseInputItem"]:
        """Forgets the most recent event and returns it as an item (None
        when there is none). Only events not compacted yet can be popped."""
        return await asyncio.to_thread(self._pop_item)

    async def clear_session(self) -> None:
        """Erases the conversation (see the module's docstring)."""
        await asyncio.to_thread(self._clear_session)

    # The blocking work, in worker threads.

    def _get_items(self, limit: Optional[int]) -> list:
        if limit == 0:
            return []
        with self._lock:
            try:
                prompt = self.client.prepare_request(
                    self.session_id, model=self.model, render_format="openai-responses",
                    recall=self.recall, user_id=self.user_id)
            except grpc.RpcError as err:
                if self._absent(err):
                    return []
                raise
        payload = prompt.payload
        rendered = list(payload.get("input", []))
        if payload.get("instructions"):  # a system prompt another client stored
            rendered.insert(0, {"role": "system", "content": payload["instructions"]})
        items = [out for item in rendered if (out := _from_prompt(item)) is not None]
        return items if limit is None or limit < 0 else items[-limit:]

    def _add_items(self, items: list) -> None:
        batch = [(n, item, event) for n, item in enumerate(items)
                 if (event := self._to_event(item)) is not None]
        if not batch:
            return
        with self._lock:
            # Enough whole turns for the batch (each user message starts one)
            # and the trace before it.
            turns = 2 + sum(event.trace_type == _USER for _, _, event in batch)
            tail = self._tail(turns)
            size = len(batch)
            if len(tail) >= size:
                before = tail[-size - 1].id if len(tail) > size else ""
                if [t.event_id for t in tail[-size:]] == _event_ids(before, batch):
                    return  # this very batch was stored after that trace: a retry
            for event, event_id in zip((e for _, _, e in batch),
                                       _event_ids(tail[-1].id if tail else "", batch)):
                event.event_id = event_id
            self.client.ingest(self.session_id, [e for _, _, e in batch], user_id=self.user_id)

    def _pop_item(self) -> Optional[dict]:
        with self._lock:
            tail = self._tail(1)
            if not tail:
                return None
            last = tail[-1]
            self.client.forget_events(self.session_id, [last.id])
            if last.trace_type in (_CALL, _RESULT):
                # Engram forgets a tool call with its result (and every call and
                # result of the same id in the turn): the ones not popped go
                # back, in order, under their event ids.
                partners = [t for t in tail[:-1] if t.trace_type in (_CALL, _RESULT)
                            and t.tool_call_id == last.tool_call_id]
                if partners:
                    self.client.ingest(self.session_id, [_again(t) for t in partners])
            return _from_trace(last)

    def _clear_session(self) -> None:
        with self._lock:
            try:
                self.client.delete_agent(self.session_id)
                return
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.NOT_FOUND:
                    return
                if err.code() != grpc.StatusCode.PERMISSION_DENIED:
                    raise
            # Not an admin token: forget every turn (the stats count up to the
            # highest turn number, turn_0001 onwards).
            try:
                turns = self.client.context_stats(self.session_id, self.model).turns
            except grpc.RpcError as err:
                if self._absent(err):
                    return
                raise
            for n in range(1, turns + 1):
                self.client.forget_turn(self.session_id, f"turn_{n:04d}")

    def _tail(self, turns: int) -> list:
        """The traces of the last `turns` turns not compacted yet, in order."""
        try:
            return list(self.client.retrieve(self.session_id, raw_tail_turns=turns,
                                              max_episodic=0, max_semantic=0).raw_tail)
        except grpc.RpcError as err:
            if self._absent(err):
                return []
            raise

    def _absent(self, err: grpc.RpcError) -> bool:
        """Whether a read failed because the conversation does not exist yet:
        NOT_FOUND, or for a session of a user PERMISSION_DENIED, which is what
        a token scoped to users gets for an agent no write has bound to its
        user yet (a write of this session binds it, or fails if it cannot)."""
        return err.code() == grpc.StatusCode.NOT_FOUND or (
            bool(self.user_id) and err.code() == grpc.StatusCode.PERMISSION_DENIED)

    def _to_event(self, item: dict) -> Optional[types.TraceEvent]:
        """The Engram event of an SDK item, or None for what is not stored."""
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message" and item.get("role") in ("user", "assistant"):
            text, images = _content(item.get("content"))
            if item["role"] == "user" and (text or images):
                return user(text, media={"images": images} if images else None)
            if item["role"] == "assistant" and text:
                return assistant(text)
            return None  # an empty message: nothing to keep
        if kind == "function_call":
            return tool_call(item["call_id"], item["name"], _arguments(item.get("arguments")))
        if kind == "function_call_output":
            return tool_result(item["call_id"], item.get("output"))
        label = item.get("role") if kind == "message" else kind
        if kind != "reasoning" and label not in self._skipped_kinds:
            self._skipped_kinds.add(label)  # say it once per kind
            log.warning("EngramSession %s: %s items are not stored in Engram; skipped",
                        self.session_id, label)
        return None


def _as_dict(item: Any) -> dict:
    if hasattr(item, "model_dump"):  # a pydantic item (the SDK passes dicts)
        return item.model_dump(exclude_unset=True, mode="json")
    return dict(item)


def _event_ids(before: str, batch: list) -> list:
    """Event ids of a batch stored after trace `before`: the same batch after
    the same trace gets the same ids."""
    out = []
    for n, item, _ in batch:
        key = json.dumps([before, n, item], sort_keys=True, separators=(",", ":"), default=str)
        out.append("oa-" + hashlib.sha256(key.encode()).hexdigest()[:32])
    return out


def _content(content: Any) -> tuple:
    """(text, image URLs) of a message's content: a string or content parts."""
    if isinstance(content, str):
        return content, []
    texts, images = [], []
    for part in content or ():
        kind = part.get("type")
        if kind in ("input_text", "output_text"):
            texts.append(part.get("text", ""))
        elif kind == "refusal":
            texts.append(part.get("refusal", ""))
        elif kind == "input_image" and part.get("image_url"):
            images.append(part["image_url"])
    return "\n".join(t for t in texts if t), images


def _arguments(raw: Optional[str]) -> dict:
    """A function call's arguments (JSON text) as the dict Engram stores."""
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {RAW_ARGUMENTS: raw}


def _arguments_text(args: dict) -> str:
    """Arguments as JSON text, one spelling whatever the source: compact,
    sorted keys, whole numbers without a fraction (as Engram renders them)."""
    if set(args) == {RAW_ARGUMENTS} and isinstance(args[RAW_ARGUMENTS], str):
        return args[RAW_ARGUMENTS]
    return json.dumps(_whole(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _whole(value: Any) -> Any:
    """Protobuf Struct numbers are doubles: 2.0 is the 2 that was sent."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return value


def _from_prompt(item: dict) -> Optional[dict]:
    """An item of Engram's rendered input as get_items returns it."""
    kind, role = item.get("type"), item.get("role")
    if kind == "function_call_output" and item.get("output") == PENDING_RESULT:
        return None
    if kind == "function_call":
        return {**item, "arguments": _arguments_text(json.loads(item["arguments"] or "{}"))}
    if role == "system" and isinstance(item.get("content"), str):
        # After everything a snapshot summarized was forgotten, Engram still
        # renders its section headers alone: nothing for the model.
        lines = [line.strip() for line in item["content"].splitlines() if line.strip()]
        if all(_HEADER.fullmatch(line) for line in lines):
            return None
    return item


def _from_trace(trace: types.RawTrace) -> dict:
    """A stored trace as get_items shows it (Engram's rendering of it)."""
    if trace.trace_type == _USER:
        if not trace.media.images:
            return {"role": "user", "content": trace.content}
        parts = [{"type": "input_text", "text": trace.content}] if trace.content else []
        parts += [{"type": "input_image", "image_url": url, "detail": "auto"}
                  for url in trace.media.images]
        return {"role": "user", "content": parts}
    if trace.trace_type == _ASSISTANT:
        return {"role": "assistant", "content": trace.content}
    if trace.trace_type == _CALL:
        return {"type": "function_call", "call_id": trace.tool_call_id, "name": trace.tool_name,
                "arguments": _arguments_text(json_format.MessageToDict(trace.tool_args))}
    result = json_format.MessageToDict(trace.tool_result) if trace.HasField("tool_result") else None
    if result is None:
        output = trace.content
    elif isinstance(result, str):
        output = result
    else:
        # Engram keeps JSON objects' keys sorted (protobuf Structs).
        output = json.dumps(_whole(result), sort_keys=True, separators=(",", ":"),
                            ensure_ascii=False)
    if trace.tool_error:
        output = f"error: {trace.tool_error}\n{output}" if output else f"error: {trace.tool_error}"
    return {"type": "function_call_output", "call_id": trace.tool_call_id, "output": output}


def _again(trace: types.RawTrace) -> types.TraceEvent:
    """A stored trace as the event that stores it again, in its turn."""
    return types.TraceEvent(
        trace_type=trace.trace_type, content=trace.content, turn_id=trace.turn_id,
        event_id=trace.event_id, ts=trace.ts, tool_name=trace.tool_name,
        tool_call_id=trace.tool_call_id,
        tool_args=trace.tool_args if trace.HasField("tool_args") else None,
        tool_result=trace.tool_result if trace.HasField("tool_result") else None,
        tool_error=trace.tool_error, source_event=trace.source_event,
        correlation_id=trace.correlation_id, tags=list(trace.tags),
        media=trace.media if trace.HasField("media") else None, name=trace.name)
