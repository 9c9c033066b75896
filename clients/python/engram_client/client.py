"""EngramClient: plain Python values in, protobuf messages (or dicts) out.

Every request field of the API (proto/engram/v1/service.proto) has a
parameter here, and every TraceEvent field one in the event helpers
(tests/test_proto_coverage.py fails when one is missing).

Errors are grpc.RpcError as raised by grpcio; `err.code()` is the status
(INVALID_ARGUMENT, NOT_FOUND, UNAUTHENTICATED, PERMISSION_DENIED, ...).
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, Union

import grpc
from google.protobuf import struct_pb2

from engram.v1 import facts_pb2 as facts
from engram.v1 import memory_pb2 as memory
from engram.v1 import service_pb2 as svc
from engram.v1 import service_pb2_grpc
from engram.v1 import types_pb2 as types

FORMATS = {
    None: types.RENDER_FORMAT_UNSPECIFIED,
    "openai-chat": types.RENDER_FORMAT_OPENAI_CHAT,
    "openai-responses": types.RENDER_FORMAT_OPENAI_RESPONSES,
    "anthropic": types.RENDER_FORMAT_ANTHROPIC_MESSAGES,
    "gemini": types.RENDER_FORMAT_GEMINI,
}

SEARCH_MODES = {
    None: types.SEARCH_MODE_UNSPECIFIED,
    "ranked": types.SEARCH_MODE_RANKED,
    "match-all-words": types.SEARCH_MODE_MATCH_ALL_WORDS,
}

TRACE_TYPES = {
    "user": types.TRACE_TYPE_USER,
    "assistant": types.TRACE_TYPE_ASSISTANT,
    "tool_call": types.TRACE_TYPE_TOOL_CALL,
    "tool_result": types.TRACE_TYPE_TOOL_RESULT,
}

BLOCK_FORMATS = {
    None: memory.BLOCK_FORMAT_UNSPECIFIED,
    "text": memory.BLOCK_FORMAT_TEXT,
    "json": memory.BLOCK_FORMAT_JSON,
}


def _scope(agent_id: Optional[str], user_id: Optional[str],
           global_scope: bool) -> memory.MemoryScope:
    """The scope of a memory block: exactly one of an agent (one
    conversation), a user (every conversation of the user), or global."""
    given = [x for x in (agent_id is not None, user_id is not None, global_scope) if x]
    if len(given) != 1:
        raise ValueError("give exactly one of agent_id, user_id or global_scope=True")
    if agent_id is not None:
        return memory.MemoryScope(agent_id=agent_id)
    if user_id is not None:
        return memory.MemoryScope(user_id=user_id)
    return memory.MemoryScope(**{"global": True})


MediaLike = Union[types.Media, Mapping[str, Sequence[str]], None]


def _media(media: MediaLike) -> Optional[types.Media]:
    """{"images": [...], "audio": [...], "video": [...]} (URLs) as Media."""
    if media is None or isinstance(media, types.Media):
        return media
    unknown = set(media) - {"images", "audio", "video"}
    if unknown:
        raise ValueError(f"media takes images, audio and video, not {sorted(unknown)}")
    return types.Media(**{k: list(v) for k, v in media.items()})


def _event(trace_type: int, *, event_id: str, name: str = "", media: MediaLike = None,
           ts: Optional[float], turn_id: str, source_event: str, correlation_id: str,
           tags: Iterable[str], **fields) -> types.TraceEvent:
    return types.TraceEvent(trace_type=trace_type, event_id=event_id, name=name,
                            media=_media(media), ts=ts, turn_id=turn_id,
                            source_event=source_event, correlation_id=correlation_id,
                            tags=list(tags), **fields)


def user(text: str = "", *, event_id: str = "", name: str = "", media: MediaLike = None,
         ts: Optional[float] = None, turn_id: str = "", source_event: str = "",
         correlation_id: str = "", tags: Iterable[str] = ()) -> types.TraceEvent:
    """A user message: starts the next turn. `name` is who said it
    ("Caroline"), `media` image/audio/video URLs ({"images": [...]}), `ts`
    the event time in epoch seconds (the server's clock when None)."""
    return _event(types.TRACE_TYPE_USER, content=text, event_id=event_id, name=name,
                  media=media, ts=ts, turn_id=turn_id, source_event=source_event,
                  correlation_id=correlation_id, tags=tags)


def assistant(text: str = "", *, event_id: str = "", name: str = "", media: MediaLike = None,
              ts: Optional[float] = None, turn_id: str = "", source_event: str = "",
              correlation_id: str = "", tags: Iterable[str] = ()) -> types.TraceEvent:
    """The model's text answer (options as for user())."""
    return _event(types.TRACE_TYPE_ASSISTANT, content=text, event_id=event_id, name=name,
                  media=media, ts=ts, turn_id=turn_id, source_event=source_event,
                  correlation_id=correlation_id, tags=tags)


def tool_call(call_id: str, name: str, args: Optional[dict] = None, *, event_id: str = "",
              ts: Optional[float] = None, turn_id: str = "", source_event: str = "",
              correlation_id: str = "", tags: Iterable[str] = ()) -> types.TraceEvent:
    """The model asked for a tool; `args` is a plain dict."""
    s = struct_pb2.Struct()
    s.update(args or {})
    return _event(types.TRACE_TYPE_TOOL_CALL, tool_call_id=call_id, tool_name=name,
                  tool_args=s, event_id=event_id, ts=ts, turn_id=turn_id,
                  source_event=source_event, correlation_id=correlation_id, tags=tags)


def tool_result(call_id: str, result: Any = None, *, name: str = "", error: str = "",
                event_id: str = "", ts: Optional[float] = None, turn_id: str = "",
                source_event: str = "", correlation_id: str = "",
                tags: Iterable[str] = ()) -> types.TraceEvent:
    """A tool's answer (any JSON value) or, with `error`, its failure;
    `name` is the tool's name."""
    v = struct_pb2.Value()
    if isinstance(result, str):
        v.string_value = result
    else:
        # Value has no direct setter for arbitrary JSON; go through a Struct.
        holder = struct_pb2.Struct()
        holder.update({"v": result})
        v.CopyFrom(holder.fields["v"])
    return _event(types.TRACE_TYPE_TOOL_RESULT, tool_call_id=call_id, tool_name=name,
                  tool_result=v, tool_error=error, event_id=event_id, ts=ts, turn_id=turn_id,
                  source_event=source_event, correlation_id=correlation_id, tags=tags)


@dataclass
class Prompt:
    """What PrepareRequest answered; `payload` is the rendered request body."""

    response: svc.PrepareRequestResponse

    @property
    def payload(self) -> Optional[dict]:
        raw = self.response.rendered_payload_json
        return json.loads(raw) if raw else None

    @property
    def turn_id(self) -> str:
        return self.response.turn_id

    @property
    def estimated_prompt_tokens(self) -> int:
        return self.response.estimated_prompt_tokens

    @property
    def warnings(self) -> list:
        return list(self.response.warnings)

    @property
    def recalled(self) -> list:
        """The memories in the prompt's [MEMORY:RECALLED] block, in its order."""
        return list(self.response.recalled)


class _Bearer(grpc.AuthMetadataPlugin):
    def __init__(self, token: str):
        self._metadata = (("authorization", f"Bearer {token}"),)

    def __call__(self, context, callback):
        callback(self._metadata, None)


class _CallDetails(collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                         "compression")), grpc.ClientCallDetails):
    pass


class _WithMetadata(grpc.UnaryUnaryClientInterceptor):
    """Adds the token to every call of the channel, the stub's own included."""

    def __init__(self, metadata):
        self._metadata = tuple(metadata)

    def intercept_unary_unary(self, continuation, details, request):
        details = _CallDetails(details.method, details.timeout,
                               tuple(details.metadata or ()) + self._metadata,
                               details.credentials, details.wait_for_ready,
                               getattr(details, "compression", None))
        return continuation(details, request)


class EngramClient:
    """One channel to one Engram server. Use as a context manager or call
    close(). `token` sends `authorization: Bearer <token>`; `tls_ca` (PEM
    bytes or a path) turns on TLS, `client_cert`/`client_key` add mTLS.

    `stub` is the generated MemoryServiceStub on the same channel, token
    included, for calling the API with protobuf messages directly."""

    def __init__(self, target: str = "127.0.0.1:50051", *, token: Optional[str] = None,
                 tls_ca=None, client_cert=None, client_key=None,
                 server_name: Optional[str] = None, timeout: float = 30.0):
        self.timeout = timeout
        if tls_ca is not None:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_pem(tls_ca), private_key=_pem(client_key),
                certificate_chain=_pem(client_cert))
            if token:
                creds = grpc.composite_channel_credentials(
                    creds, grpc.metadata_call_credentials(_Bearer(token)))
            options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
            self._channel = grpc.secure_channel(target, creds, options=options)
            channel = self._channel
        else:
            # grpcio refuses call credentials on insecure channels, so the
            # token rides as plain metadata (fine on localhost / a sidecar),
            # added to every call by an interceptor.
            self._channel = grpc.insecure_channel(target)
            channel = self._channel
            if token:
                channel = grpc.intercept_channel(
                    channel, _WithMetadata([("authorization", f"Bearer {token}")]))
        self.stub = service_pb2_grpc.MemoryServiceStub(channel)

    def __enter__(self) -> "EngramClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _call(self, method: str, request):
        return getattr(self.stub, method)(request, timeout=self.timeout)

    def ingest(self, agent_id: str, events: Iterable[types.TraceEvent], *,
               usage: Optional[dict] = None, model: str = "",
               user_id: str = "") -> svc.IngestResponse:
        """Stores events (see user/assistant/tool_call/tool_result); `usage`
        is the provider's {"prompt_tokens", "completion_tokens", "total_tokens"}.
        `user_id` ties the agent (a conversation) to its user, once."""
        u = None
        if usage:
            u = types.Usage(prompt_tokens=usage.get("prompt_tokens", 0),
                            completion_tokens=usage.get("completion_tokens", 0),
                            total_tokens=usage.get("total_tokens", 0))
        return self._call("Ingest", svc.IngestRequest(agent_id=agent_id, events=list(events),
                                                       usage=u, model=model,
                                                       user_id=user_id))

    def prepare_request(self, agent_id: str, *, user_input=None, system_prompt: str = "",
                        model: str = "", render_format: Optional[str] = "openai-chat",
                        max_output_tokens: int = 0, force_compaction: bool = False,
                        recall: Optional[bool] = None,
                        recall_max_tokens: Optional[int] = None, user_id: str = "",
                        preview: bool = False, strategy: str = "",
                        recall_as_of: Optional[float] = None) -> Prompt:
        """The prompt for the next LLM call. `user_input` (a str or event)
        is stored as the new turn's user message first. `render_format`:
        openai-chat, openai-responses, anthropic, gemini or None. `recall`
        turns the [MEMORY:RECALLED] block on or off for this request and
        `recall_max_tokens` bounds it (the server's [recall] settings when
        None). `user_id` as in ingest. The memory blocks the agent sees are
        in the system message; `prompt.response.blocks` lists them.
        `preview=True` shows the prompt as it stands and stores, compacts
        or starts nothing (a due compaction is a warning). `strategy`
        (summarize, trim, compact_tool_results, none) is the compaction
        strategy for this prompt; "" for the agent's own. `recall_as_of`
        (epoch seconds) recalls memories as they stood then, as
        `retrieve(as_of=...)` reads them."""
        if isinstance(user_input, str):
            user_input = user(user_input)
        if render_format not in FORMATS:
            raise ValueError(f"render_format must be one of {sorted(k for k in FORMATS if k)} or None")
        return Prompt(self._call("PrepareRequest", svc.PrepareRequestRequest(
            agent_id=agent_id, system_prompt=system_prompt, user_input=user_input, model=model,
            render_format=FORMATS[render_format], max_output_tokens=max_output_tokens,
            force_compaction=force_compaction, recall=recall,
            recall_max_tokens=recall_max_tokens, user_id=user_id, preview=preview,
            strategy=strategy, recall_as_of=recall_as_of)))

    def compact(self, agent_id: str, focus: str = "", *, strategy: str = "") -> types.CompactionReport:
        """A compaction now. `focus` is added to the summarizer's
        instructions; `strategy` as in prepare_request."""
        return self._call("Compact", svc.CompactRequest(
            agent_id=agent_id, focus=focus, strategy=strategy)).report

    def retrieve(self, agent_id: str, query: str = "", *, max_episodic: Optional[int] = None,
                 max_semantic: Optional[int] = None, raw_tail_turns: Optional[int] = None,
                 include_tool_interactions: bool = False, max_recalled: Optional[int] = None,
                 context_messages: int = 0, wait_for_index_ms: int = 0,
                 user_id: str = "", as_of: Optional[float] = None) -> svc.RetrieveResponse:
        """Memories, the raw tail and tool interactions. With a `query`, the
        best `max_recalled` memories of every kind in `recalled`, each trace
        with `context_messages` neighbours on each side; `wait_for_index_ms`
        first waits for the indexer to embed what was just written. With
        `user_id` (and agent_id ""): the user's memories across all of its
        conversations, each recalled one naming its `agent_id`. `as_of`
        (epoch seconds): memories as they stood then (messages said by
        then, summaries of what was said by then, facts true then, replaced
        or ended since or not)."""
        return self._call("Retrieve", svc.RetrieveRequest(
            agent_id=agent_id, user_id=user_id, query=query, max_episodic=max_episodic,
            max_semantic=max_semantic, raw_tail_turns=raw_tail_turns,
            include_tool_interactions=include_tool_interactions, max_recalled=max_recalled,
            context_messages=context_messages, wait_for_index_ms=wait_for_index_ms,
            as_of=as_of))

    def search_history(self, agent_id: str, query: str, *, limit: int = 0,
                       page_token: str = "", mode: Optional[str] = None,
                       trace_types: Iterable[str] = (), from_turn_id: str = "",
                       to_turn_id: str = "", from_ts: Optional[float] = None,
                       to_ts: Optional[float] = None, context_messages: int = 0,
                       wait_for_index_ms: int = 0, user_id: str = "",
                       as_of: Optional[float] = None) -> svc.SearchHistoryResponse:
        """Traces by relevance to `query` (`mode` "ranked", the default) or
        containing all its words ("match-all-words"). Filters: `trace_types`
        ("user", "assistant", "tool_call", "tool_result"), a turn range, an
        event-time range (epoch seconds). With `user_id` (and agent_id ""):
        every conversation of the user, ranked; each match names its
        `agent_id`. `as_of` (epoch seconds): only what had been said by then."""
        if mode not in SEARCH_MODES:
            raise ValueError(f"mode must be one of {sorted(k for k in SEARCH_MODES if k)} or None")
        kinds = []
        for kind in trace_types:
            if kind not in TRACE_TYPES:
                raise ValueError(f"trace_types take {sorted(TRACE_TYPES)}, not {kind!r}")
            kinds.append(TRACE_TYPES[kind])
        return self._call("SearchHistory", svc.SearchHistoryRequest(
            agent_id=agent_id, user_id=user_id, query=query, limit=limit, page_token=page_token,
            mode=SEARCH_MODES[mode], trace_types=kinds, from_turn_id=from_turn_id,
            to_turn_id=to_turn_id, from_ts=from_ts, to_ts=to_ts,
            context_messages=context_messages, wait_for_index_ms=wait_for_index_ms,
            as_of=as_of))

    def context_stats(self, agent_id: str, model: str = "") -> svc.GetContextStatsResponse:
        return self._call("GetContextStats", svc.GetContextStatsRequest(agent_id=agent_id, model=model))

    def list_compactions(self, agent_id: str,
                         page_size: int = 0) -> Iterator[types.CompactionRecord]:
        """The agent's compaction log, newest first (each compaction that
        changed the prompt or failed: trigger, tokens before and after,
        when), following pages."""
        token = ""
        while True:
            page = self._call("ListCompactions", svc.ListCompactionsRequest(
                agent_id=agent_id, page_size=page_size, page_token=token))
            yield from page.compactions
            token = page.next_page_token
            if not token:
                return

    def list_agents(self, page_size: int = 0, user_id: str = "",
                    id_contains: str = "") -> Iterator[str]:
        """Every agent id the caller may see (of `user_id` only, when given;
        containing `id_contains`, when given), following pages."""
        token = ""
        while True:
            page = self._call("ListAgents", svc.ListAgentsRequest(
                page_size=page_size, page_token=token, user_id=user_id,
                id_contains=id_contains))
            yield from page.agent_ids
            token = page.next_page_token
            if not token:
                return

    def list_users(self, page_size: int = 0) -> Iterator[str]:
        """Every user id the caller may see (with memory here: an agent
        bound, blocks, facts), following pages."""
        token = ""
        while True:
            page = self._call("ListUsers", svc.ListUsersRequest(
                page_size=page_size, page_token=token))
            yield from page.user_ids
            token = page.next_page_token
            if not token:
                return

    def delete_agent(self, agent_id: str) -> None:
        self._call("DeleteAgent", svc.DeleteAgentRequest(agent_id=agent_id))

    def fork_agent(self, source_agent_id: str, target_agent_id: str) -> str:
        return self._call("ForkAgent", svc.ForkAgentRequest(
            source_agent_id=source_agent_id, target_agent_id=target_agent_id)).agent_id


    def delete_user(self, user_id: str) -> int:
        """Erases everything the user owns; the number of agents erased."""
        return self._call("DeleteUser", memory.DeleteUserRequest(user_id=user_id)).agents_deleted

    def consolidate_user(self, user_id: str) -> types.Consolidation:
        """Reconciles the user's facts across its conversations now: the same
        fact said in other words merged (every source kept), facts on one
        subject put to the summarizer (which replaces which, which ended);
        pinned and client-written facts never change. The run as logged
        (`seq`, `trigger` "request", `merged`/`replaced`/`invalidated`/
        `unchanged`, `groups_asked`, `summarizer`, `changes`); `seq` 0 for a
        user with no facts (nothing to do, nothing logged)."""
        return self._call("ConsolidateUser", svc.ConsolidateUserRequest(
            user_id=user_id)).consolidation

    def list_consolidations(self, user_id: str,
                            page_size: Optional[int] = None) -> list:
        """The user's consolidation runs (Consolidation), newest first: the
        latest `page_size` (20 when None, at most 100; the latest 100 are
        kept), by request or after a conversation of the user went idle."""
        return list(self._call("ListConsolidations", svc.ListConsolidationsRequest(
            user_id=user_id, page_size=page_size or 0)).consolidations)

    # Memory blocks: documents in a scope that every prompt of the scope's
    # agents shows. Each helper takes the scope as exactly one of
    # `agent_id=`, `user_id=` or `global_scope=True`.

    def list_blocks(self, *, agent_id: Optional[str] = None, user_id: Optional[str] = None,
                    global_scope: bool = False) -> list:
        """The current blocks of the scope, by label."""
        return list(self._call("ListMemoryBlocks", memory.ListMemoryBlocksRequest(
            scope=_scope(agent_id, user_id, global_scope))).blocks)

    def get_block(self, label: str, *, agent_id: Optional[str] = None,
                  user_id: Optional[str] = None, global_scope: bool = False,
                  include_history: bool = False) -> memory.GetMemoryBlockResponse:
        """One block (`.block`), and with `include_history` every version,
        oldest first (`.history`)."""
        return self._call("GetMemoryBlock", memory.GetMemoryBlockRequest(
            scope=_scope(agent_id, user_id, global_scope), label=label,
            include_history=include_history))

    def put_block(self, label: str, value: str, *, agent_id: Optional[str] = None,
                  user_id: Optional[str] = None, global_scope: bool = False,
                  format: Optional[str] = None, description: Optional[str] = None,
                  limit_chars: int = 0, read_only: Optional[bool] = None,
                  expected_version: Optional[int] = None,
                  agent_user_id: str = "") -> memory.MemoryBlock:
        """Creates or replaces a block (`format` "text" or "json"; what is left
        None keeps the block's). `expected_version` guards against lost
        updates (0: the block must not exist). `agent_user_id` ties an
        agent scope's agent to its user, as ingest's `user_id` does."""
        if format not in BLOCK_FORMATS:
            raise ValueError(f"format must be one of {sorted(k for k in BLOCK_FORMATS if k)} or None")
        return self._call("PutMemoryBlock", memory.PutMemoryBlockRequest(
            scope=_scope(agent_id, user_id, global_scope), label=label, value=value,
            format=BLOCK_FORMATS[format], description=description, limit_chars=limit_chars,
            read_only=read_only, expected_version=expected_version,
            user_id=agent_user_id)).block

    def edit_block(self, label: str, *, agent_id: Optional[str] = None,
                   user_id: Optional[str] = None, global_scope: bool = False,
                   append: Optional[str] = None, replace: Optional[tuple] = None,
                   insert: Optional[tuple] = None, json_merge_patch=None,
                   expected_version: Optional[int] = None,
                   agent_user_id: str = "") -> memory.MemoryBlock:
        """One edit: `append` (text), `replace` ((old, new): old must occur
        exactly once), `insert` ((line, text): after that line, 0 the top) or
        `json_merge_patch` (a dict or JSON text; JSON blocks; starts a missing
        block from {} — how working memory begins)."""
        edits = [e for e in (append, replace, insert, json_merge_patch) if e is not None]
        if len(edits) != 1:
            raise ValueError("give exactly one of append, replace, insert or json_merge_patch")
        if append is not None:
            edit = memory.BlockEdit(append=append)
        elif replace is not None:
            edit = memory.BlockEdit(replace=memory.BlockReplace(old=replace[0], new=replace[1]))
        elif insert is not None:
            edit = memory.BlockEdit(insert=memory.BlockInsert(line=insert[0], text=insert[1]))
        else:
            patch = json_merge_patch
            edit = memory.BlockEdit(
                json_merge_patch=patch if isinstance(patch, str) else json.dumps(patch))
        return self._call("EditMemoryBlock", memory.EditMemoryBlockRequest(
            scope=_scope(agent_id, user_id, global_scope), label=label, edit=edit,
            expected_version=expected_version, user_id=agent_user_id)).block

    def delete_block(self, label: str, *, agent_id: Optional[str] = None,
                     user_id: Optional[str] = None, global_scope: bool = False,
                     expected_version: Optional[int] = None) -> int:
        """Deletes a block; the version that deleted it (history keeps it,
        with no text)."""
        return self._call("DeleteMemoryBlock", memory.DeleteMemoryBlockRequest(
            scope=_scope(agent_id, user_id, global_scope), label=label,
            expected_version=expected_version)).version

    # Facts a client manages (corrected, pinned, expiring, forgotten). Each
    # helper takes the scope as exactly one of `agent_id=` or `user_id=`.

    def add_memories(self, memories: Iterable[Union[str, Mapping[str, Any]]], *,
                     agent_id: Optional[str] = None,
                     user_id: Optional[str] = None) -> list:
        """Adds facts: each a text, or a dict with `text` and any of `tags`,
        `pinned`, `expires_at` (epoch seconds), `metadata` (str -> str) and
        `valid_from` (epoch seconds: since when it is true; default now).
        One result per fact (`id`, `outcome` ADDED or MERGED: the same fact
        was there and was updated, `version`)."""
        items = []
        for m in memories:
            m = {"text": m} if isinstance(m, str) else dict(m)
            items.append(facts.NewMemory(
                text=m.get("text", ""), tags=m.get("tags", []), pinned=m.get("pinned", False),
                expires_at=m.get("expires_at"), metadata=m.get("metadata", {}),
                valid_from=m.get("valid_from")))
        return list(self._call("AddMemories", facts.AddMemoriesRequest(
            scope=_scope(agent_id, user_id, False), memories=items)).results)

    def list_memories(self, *, agent_id: Optional[str] = None, user_id: Optional[str] = None,
                      query: str = "", tags: Sequence[str] = (),
                      include_superseded: bool = False, include_expired: bool = False,
                      page_size: int = 0,
                      source_agent_id: str = "",
                      as_of: Optional[float] = None) -> Iterator[types.SemanticItem]:
        """Every fact of the scope that contains each word of `query` and has
        every one of `tags`: pinned first, then newest first (follows the
        pages). `source_agent_id` (a user's scope only): just the user's
        facts that conversation's compactions said. `as_of` (epoch seconds):
        the facts true then, replaced since or not."""
        token = ""
        while True:
            page = self._call("ListMemories", facts.ListMemoriesRequest(
                scope=_scope(agent_id, user_id, False), query=query, tags=list(tags),
                include_superseded=include_superseded, include_expired=include_expired,
                page_size=page_size, page_token=token, source_agent_id=source_agent_id,
                as_of=as_of))
            yield from page.memories
            token = page.next_page_token
            if not token:
                return

    def get_memory(self, memory_id: str, *, agent_id: Optional[str] = None,
                   user_id: Optional[str] = None) -> types.SemanticItem:
        return self._call("GetMemory", facts.GetMemoryRequest(
            scope=_scope(agent_id, user_id, False), id=memory_id)).memory

    def memory_history(self, memory_id: str, *, agent_id: Optional[str] = None,
                       user_id: Optional[str] = None) -> list:
        """Every version of a fact, oldest first (a deletion last, no text)."""
        return list(self._call("GetMemoryHistory", facts.GetMemoryHistoryRequest(
            scope=_scope(agent_id, user_id, False), id=memory_id)).versions)

    def update_memory(self, memory_id: str, *, agent_id: Optional[str] = None,
                      user_id: Optional[str] = None, text: Optional[str] = None,
                      tags: Optional[Sequence[str]] = None, pinned: Optional[bool] = None,
                      expires_at: Optional[float] = None,
                      metadata: Optional[Mapping[str, str]] = None,
                      expected_version: int = 0,
                      valid_from: Optional[float] = None) -> types.SemanticItem:
        """A new version of a fact (what is left None stays; `expires_at=0`:
        never expires). With `expected_version`, a fact changed meanwhile is
        ABORTED and nothing changes."""
        return self._call("UpdateMemory", facts.UpdateMemoryRequest(
            scope=_scope(agent_id, user_id, False), id=memory_id, text=text,
            tags=None if tags is None else facts.StringList(values=list(tags)),
            pinned=pinned, expires_at=expires_at,
            metadata=None if metadata is None else facts.Metadata(entries=dict(metadata)),
            expected_version=expected_version, valid_from=valid_from)).memory

    def delete_memory(self, memory_id: str, *, agent_id: Optional[str] = None,
                      user_id: Optional[str] = None, expected_version: int = 0) -> int:
        """Deletes a fact (no text of it is left); the version that deleted it."""
        return self._call("DeleteMemory", facts.DeleteMemoryRequest(
            scope=_scope(agent_id, user_id, False), id=memory_id,
            expected_version=expected_version)).version

    def forget_turn(self, agent_id: str, turn_id: str) -> facts.ForgetResponse:
        """Forgets a turn: its traces erased everywhere Engram keeps them,
        the facts drawn from them deleted, the summaries that covered them
        rewritten from their other turns (hidden until then)."""
        return self._call("ForgetTurn", facts.ForgetTurnRequest(agent_id=agent_id,
                                                                turn_id=turn_id))

    def forget_events(self, agent_id: str, ids: Iterable[str]) -> facts.ForgetResponse:
        """As forget_turn, for some traces: trace ids or your event ids (a
        tool call and its result go together)."""
        return self._call("ForgetEvents", facts.ForgetEventsRequest(agent_id=agent_id,
                                                                    ids=list(ids)))

    def export_memory(self, *, agent_id: Optional[str] = None,
                      user_id: Optional[str] = None) -> Iterator[bytes]:
        """An agent's or a user's memory as a bundle of JSON lines
        (docs/EXPORT.md), in pieces of at most 1 MiB: write them, in order,
        to a file. Every trace, summary, fact version and block version,
        ids and times kept."""
        request = facts.ExportMemoryRequest(scope=_scope(agent_id, user_id, False))
        for piece in self.stub.ExportMemory(request, timeout=self.timeout):
            yield piece.lines

    def import_memory(self, bundle: Union[bytes, Iterable[bytes]], *,
                      replace: bool = False) -> facts.ImportMemoryResponse:
        """Recreates an exported bundle (bytes, or pieces of it in order):
        all of it is checked before anything is written. ALREADY_EXISTS for
        an agent (or a user's memory) that exists, unless `replace`."""
        pieces = [bundle] if isinstance(bundle, (bytes, bytearray)) else bundle

        def requests():
            first = True
            for piece in pieces:
                # `replace` is read from the first message.
                yield facts.ImportMemoryRequest(lines=bytes(piece), replace=replace and first)
                first = False
        return self.stub.ImportMemory(requests(), timeout=self.timeout)


def _pem(value) -> Optional[bytes]:
    if value is None or isinstance(value, bytes):
        return value
    with open(value, "rb") as f:
        return f.read()
