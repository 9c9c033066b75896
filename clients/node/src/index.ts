/**
 * Engram's Node/TypeScript client: a thin promise-based wrapper over
 * @grpc/grpc-js with the service loaded from engram's .proto files at run
 * time (copied into ./proto by `npm run build`, which also generates the
 * message types in src/generated; ENGRAM_PROTO_DIR or the `protoDir` option
 * point elsewhere).
 *
 * Every request field of the API has an option here, and every TraceEvent
 * field one in the event helpers (test/proto_coverage.test.ts fails when
 * one is missing).
 *
 * Errors reject with grpc-js's ServiceError: `err.code` is a grpc.status.
 */
import * as path from "node:path";
import * as fs from "node:fs";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
// Types generated from the protos by proto-loader-gen-types (`npm run proto`).
import type { CompactionRecord__Output } from "./generated/engram/v1/CompactionRecord";
import type { Consolidation__Output } from "./generated/engram/v1/Consolidation";
import type { CompactionReport__Output } from "./generated/engram/v1/CompactionReport";
import type { GetContextStatsResponse__Output } from "./generated/engram/v1/GetContextStatsResponse";
import type { GetMemoryBlockResponse__Output } from "./generated/engram/v1/GetMemoryBlockResponse";
import type { MemoryBlock__Output } from "./generated/engram/v1/MemoryBlock";
import type { IngestResponse__Output } from "./generated/engram/v1/IngestResponse";
import type { PrepareRequestResponse__Output } from "./generated/engram/v1/PrepareRequestResponse";
import type { RetrieveResponse__Output } from "./generated/engram/v1/RetrieveResponse";
import type { SearchHistoryResponse__Output } from "./generated/engram/v1/SearchHistoryResponse";
import type { AddedMemory__Output } from "./generated/engram/v1/AddedMemory";
import type { SemanticItem__Output } from "./generated/engram/v1/SemanticItem";
import type { ForgetResponse__Output } from "./generated/engram/v1/ForgetResponse";
import type { ImportMemoryResponse__Output } from "./generated/engram/v1/ImportMemoryResponse";

export { status } from "@grpc/grpc-js";

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** A protobuf google.protobuf.Value as proto-loader represents it. */
type PbValue =
  | { nullValue: "NULL_VALUE" }
  | { numberValue: number }
  | { stringValue: string }
  | { boolValue: boolean }
  | { structValue: PbStruct }
  | { listValue: { values: PbValue[] } };
type PbStruct = { fields: Record<string, PbValue> };

export type TraceType = "TRACE_TYPE_USER" | "TRACE_TYPE_ASSISTANT" | "TRACE_TYPE_TOOL_CALL" | "TRACE_TYPE_TOOL_RESULT";
/** A trace type as the JSONL files name it (SearchHistory's `traceTypes`). */
export type TraceKind = "user" | "assistant" | "tool_call" | "tool_result";

/** Media attached to an event, as URLs (https: or data:). */
export interface Media {
  images?: string[];
  audio?: string[];
  video?: string[];
}

/** An event to ingest; build one with user(), assistant(), toolCall(), toolResult(). */
export interface TraceEvent {
  trace_type: TraceType;
  content?: string;
  source_event?: string;
  turn_id?: string;
  event_id?: string;
  ts?: number;
  tool_name?: string;
  tool_call_id?: string;
  tool_args?: PbStruct;
  tool_result?: PbValue;
  tool_error?: string;
  correlation_id?: string;
  tags?: string[];
  media?: Media;
  name?: string;
}

/** What every event helper takes besides its own arguments. */
export interface EventOptions {
  /** Client retry key: a retry with the same id stores nothing new. */
  eventId?: string;
  /** Event time in epoch seconds; the server's clock when absent. */
  ts?: number;
  /** Join this existing turn instead of the current one. */
  turnId?: string;
  /** Free-form origin ("cli", "slack", "tool:search"). */
  sourceEvent?: string;
  correlationId?: string;
  tags?: string[];
}

/** user() and assistant(): also who said it and attached media. */
export interface MessageOptions extends EventOptions {
  /** The participant's display name ("Caroline"). */
  name?: string;
  media?: Media;
}

export interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  total_tokens?: number;
}

export type RenderFormat = "openai-chat" | "openai-responses" | "anthropic" | "gemini" | null;

const FORMATS: Record<string, string> = {
  "openai-chat": "RENDER_FORMAT_OPENAI_CHAT",
  "openai-responses": "RENDER_FORMAT_OPENAI_RESPONSES",
  anthropic: "RENDER_FORMAT_ANTHROPIC_MESSAGES",
  gemini: "RENDER_FORMAT_GEMINI",
};

export function toValue(v: Json): PbValue {
  if (v === null) return { nullValue: "NULL_VALUE" };
  if (typeof v === "number") return { numberValue: v };
  if (typeof v === "string") return { stringValue: v };
  if (typeof v === "boolean") return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  return { structValue: toStruct(v) };
}

export function toStruct(o: { [key: string]: Json }): PbStruct {
  return { fields: Object.fromEntries(Object.entries(o).map(([k, v]) => [k, toValue(v)])) };
}

/** A google.protobuf.Value (as received) back to plain JSON. */
export function fromValue(v: any): Json {
  if (!v) return null;
  if ("stringValue" in v) return v.stringValue;
  if ("numberValue" in v) return v.numberValue;
  if ("boolValue" in v) return v.boolValue;
  if ("structValue" in v) return fromStruct(v.structValue);
  if ("listValue" in v) return (v.listValue.values ?? []).map(fromValue);
  return null;
}

export function fromStruct(s: any): { [key: string]: Json } {
  return Object.fromEntries(Object.entries(s?.fields ?? {}).map(([k, v]) => [k, fromValue(v)]));
}

function eventFields(opts: EventOptions): Partial<TraceEvent> {
  return {
    event_id: opts.eventId ?? "",
    ts: opts.ts,
    turn_id: opts.turnId ?? "",
    source_event: opts.sourceEvent ?? "",
    correlation_id: opts.correlationId ?? "",
    tags: opts.tags ?? [],
  };
}

function message(traceType: TraceType, content: string, opts: string | MessageOptions): TraceEvent {
  const o: MessageOptions = typeof opts === "string" ? { eventId: opts } : opts;
  return { trace_type: traceType, content, ...eventFields(o), name: o.name ?? "", media: o.media };
}

/** A user message: starts the next turn. `opts` is the event id, or options. */
export const user = (content: string, opts: string | MessageOptions = {}): TraceEvent =>
  message("TRACE_TYPE_USER", content, opts);
/** The model's text answer. */
export const assistant = (content: string, opts: string | MessageOptions = {}): TraceEvent =>
  message("TRACE_TYPE_ASSISTANT", content, opts);
/** The model asked for a tool. */
export const toolCall = (callId: string, name: string, args: { [key: string]: Json } = {},
  opts: EventOptions = {}): TraceEvent =>
  ({ trace_type: "TRACE_TYPE_TOOL_CALL", tool_call_id: callId, tool_name: name, tool_args: toStruct(args),
     ...eventFields(opts) });
/** A tool's answer (any JSON value) or, with `error`, its failure; `name` is the tool's. */
export const toolResult = (callId: string, result: Json,
  opts: EventOptions & { name?: string; error?: string } = {}): TraceEvent =>
  ({ trace_type: "TRACE_TYPE_TOOL_RESULT", tool_call_id: callId, tool_result: toValue(result),
     tool_name: opts.name ?? "", tool_error: opts.error ?? "", ...eventFields(opts) });

export interface ClientOptions {
  /** Sent as `authorization: Bearer <token>`. */
  token?: string;
  /** PEM of the CA that signed the server's certificate: turns on TLS. */
  tlsCa?: Buffer | string;
  /** Client certificate and key (PEM) for servers that require mTLS. */
  clientCert?: Buffer | string;
  clientKey?: Buffer | string;
  /** Per-call deadline in milliseconds (default 30 s). */
  timeoutMs?: number;
  /** Where engram/v1/*.proto live (default: the package's proto/). */
  protoDir?: string;
}

export interface PrepareOptions {
  /** Ties the agent (a conversation) to its user, once. */
  userId?: string;
  userInput?: string | TraceEvent;
  systemPrompt?: string;
  model?: string;
  renderFormat?: RenderFormat;
  maxOutputTokens?: number;
  forceCompaction?: boolean;
  /** The [MEMORY:RECALLED] block on or off (the server's recall.enabled when unset). */
  recall?: boolean;
  /** The recall block's size at most (recall.max_tokens when unset). */
  recallMaxTokens?: number;
  /** The prompt as it stands: nothing stored, compacted or started (a due compaction is a warning). */
  preview?: boolean;
  /** The compaction strategy for this prompt (the agent's policy.strategy when unset). */
  strategy?: Strategy;
  /** Epoch seconds: recall memories as they stood then (as Retrieve's asOf). */
  recallAsOf?: number;
}

/** What a compaction may do: summarize old turns, trim them (archived, no
 * model call), only hide old tool results, or nothing. */
export type Strategy = "summarize" | "trim" | "compact_tool_results" | "none";

/** Who a memory block belongs to: exactly one of an agent (one
 * conversation), a user (every conversation of the user), or global. */
export type Scope = { agentId: string } | { userId: string } | { global: true };

export type BlockFormat = "text" | "json";

const BLOCK_FORMATS: Record<BlockFormat, string> = {
  text: "BLOCK_FORMAT_TEXT",
  json: "BLOCK_FORMAT_JSON",
};

export interface PutBlockOptions {
  /** What is left unset keeps the block's (the defaults for a new block). */
  format?: BlockFormat;
  description?: string;
  limitChars?: number;
  readOnly?: boolean;
  /** The version the write expects (0: the block must not exist). */
  expectedVersion?: number;
  /** For an agent scope: ties the agent to its user, as ingest's userId does. */
  agentUserId?: string;
}

/** One edit of a block: exactly one of the four. */
export type BlockEdit =
  | { append: string }
  | { replace: { old: string; new: string } }
  | { insert: { line: number; text: string } }
  | { jsonMergePatch: Json | string };

/** A fact to add: its text, or the text with tags, pinned, expiry (epoch
 * seconds) and the client's own metadata. */
export type NewMemory = string | {
  text: string;
  tags?: string[];
  pinned?: boolean;
  expiresAt?: number;
  metadata?: Record<string, string>;
  /** Epoch seconds: since when it is true (default: now). */
  validFrom?: number;
};

/** Who a fact belongs to: an agent (one conversation) or a user. */
export type FactScope = { agentId: string } | { userId: string };

export interface ListMemoriesOptions {
  /** Only facts containing every word of it (case aside). */
  query?: string;
  /** Only facts with every one of these tags. */
  tags?: string[];
  includeSuperseded?: boolean;
  includeExpired?: boolean;
  pageSize?: number;
  /** A user's scope only: the user's facts this conversation's compactions said. */
  sourceAgentId?: string;
  /** Epoch seconds: the facts true then, replaced since or not. */
  asOf?: number;
}

export interface UpdateMemoryOptions {
  /** What is left unset stays. */
  text?: string;
  tags?: string[];
  pinned?: boolean;
  /** Epoch seconds; 0: never expires. */
  expiresAt?: number;
  /** Replaces the whole map. */
  metadata?: Record<string, string>;
  /** The version the update expects (a fact changed meanwhile: ABORTED). */
  expectedVersion?: number;
  /** Epoch seconds: since when the new version is true (default: now). */
  validFrom?: number;
}

function scopeOf(scope: Scope): object {
  const keys = Object.keys(scope);
  if (keys.length !== 1) throw new Error("a scope is exactly one of { agentId }, { userId } or { global: true }");
  if ("agentId" in scope) return { agent_id: scope.agentId };
  if ("userId" in scope) return { user_id: scope.userId };
  if (scope.global === true) return { global: true };
  throw new Error("a scope is exactly one of { agentId }, { userId } or { global: true }");
}

function editOf(edit: BlockEdit): object {
  if ("append" in edit) return { append: edit.append };
  if ("replace" in edit) return { replace: edit.replace };
  if ("insert" in edit) return { insert: edit.insert };
  const patch = edit.jsonMergePatch;
  return { json_merge_patch: typeof patch === "string" ? patch : JSON.stringify(patch) };
}

export interface RetrieveOptions {
  /** Rank every memory for this text: `recalled` holds the best. */
  query?: string;
  maxEpisodic?: number;
  maxSemantic?: number;
  rawTailTurns?: number;
  includeToolInteractions?: boolean;
  /** With a query: memories in `recalled` (10 when unset, at most 100). */
  maxRecalled?: number;
  /** With a query: neighbouring messages of each recalled trace, each side (at most 10). */
  contextMessages?: number;
  /** With a query: first wait this long (ms, at most 60000) for the indexer. */
  waitForIndexMs?: number;
  /** With agentId "": the user's memories across all of its conversations. */
  userId?: string;
  /** Epoch seconds: memories as they stood then (messages said by then, facts true then, replaced or ended since or not). */
  asOf?: number;
}

export type SearchMode = "ranked" | "match-all-words";

export interface SearchOptions {
  /** Matches per page (default 20, at most 200). */
  limit?: number;
  /** The previous page's next_page_token. */
  pageToken?: string;
  /** "ranked" (the default) or "match-all-words". */
  mode?: SearchMode;
  /** Only traces of these types (all when empty). */
  traceTypes?: TraceKind[];
  /** Only turns in this inclusive range ("turn_0003"). */
  fromTurnId?: string;
  toTurnId?: string;
  /** Only events in this inclusive time range (epoch seconds). */
  fromTs?: number;
  toTs?: number;
  /** Ranked mode: neighbouring traces returned on each side of each match (at most 10). */
  contextMessages?: number;
  /** Ranked mode: first wait this long (ms, at most 60000) for the indexer (read-your-writes). */
  waitForIndexMs?: number;
  /** With agentId "": every conversation of this user, ranked (each match names its agent_id). */
  userId?: string;
  /** Epoch seconds: only what had been said by then. */
  asOf?: number;
}

const SEARCH_MODES: Record<SearchMode, string> = {
  ranked: "SEARCH_MODE_RANKED",
  "match-all-words": "SEARCH_MODE_MATCH_ALL_WORDS",
};

const TRACE_KINDS: Record<TraceKind, TraceType> = {
  user: "TRACE_TYPE_USER",
  assistant: "TRACE_TYPE_ASSISTANT",
  tool_call: "TRACE_TYPE_TOOL_CALL",
  tool_result: "TRACE_TYPE_TOOL_RESULT",
};

/** PrepareRequest's answer, with the rendered body decoded. */
export interface Prompt {
  /** The provider request body (parsed JSON), or null without a render format. */
  payload: any | null;
  turnId: string;
  estimatedPromptTokens: number;
  warnings: string[];
  /** The memories in the prompt's [MEMORY:RECALLED] block, in its order. */
  recalled: PrepareRequestResponse__Output["recalled"];
  raw: PrepareRequestResponse__Output;
}

function loadService(protoDir: string): grpc.ServiceClientConstructor {
  const file = path.join(protoDir, "engram", "v1", "service.proto");
  if (!fs.existsSync(file)) {
    throw new Error(`no ${file}: run \`npm run build\` or set ENGRAM_PROTO_DIR`);
  }
  const definition = protoLoader.loadSync(file, {
    includeDirs: [protoDir],
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const loaded = grpc.loadPackageDefinition(definition) as any;
  return loaded.engram.v1.MemoryService;
}

const pem = (v?: Buffer | string) =>
  v === undefined ? null : Buffer.isBuffer(v) ? v : fs.readFileSync(v);

/** Adds `metadata` to every call of a client (its raw methods included). */
function withMetadata(metadata: grpc.Metadata): grpc.Interceptor {
  return (options, nextCall) => new grpc.InterceptingCall(nextCall(options), {
    start(callMetadata, listener, next) {
      callMetadata.merge(metadata);
      next(callMetadata, listener);
    },
  });
}

export class EngramClient {
  /** The grpc-js client of engram.v1.MemoryService on the same channel,
   * token included, for calling the API with plain request objects. */
  readonly stub: any;
  private readonly timeoutMs: number;

  /** `target` is host:port, e.g. "127.0.0.1:50051". */
  constructor(target = "127.0.0.1:50051", opts: ClientOptions = {}) {
    const protoDir = opts.protoDir ?? process.env.ENGRAM_PROTO_DIR ?? path.join(__dirname, "..", "..", "proto");
    const Service = loadService(protoDir);
    const creds = opts.tlsCa !== undefined
      ? grpc.credentials.createSsl(pem(opts.tlsCa), pem(opts.clientKey), pem(opts.clientCert))
      : grpc.credentials.createInsecure();
    const interceptors: grpc.Interceptor[] = [];
    if (opts.token) {
      const metadata = new grpc.Metadata();
      metadata.set("authorization", `Bearer ${opts.token}`);
      interceptors.push(withMetadata(metadata));
    }
    this.stub = new Service(target, creds, { interceptors });
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  close(): void {
    this.stub.close();
  }

  private call<T = any>(method: string, request: object): Promise<T> {
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + this.timeoutMs);
      this.stub[method](request, { deadline }, (err: grpc.ServiceError | null, res: T) =>
        err ? reject(err) : resolve(res));
    });
  }

  /** Stores events; `usage` is what the provider reported for the call that made them. */
  ingest(agentId: string, events: TraceEvent[], opts: { usage?: Usage; model?: string; userId?: string } = {}): Promise<IngestResponse__Output> {
    return this.call("Ingest", {
      agent_id: agentId, events, usage: opts.usage ?? null, model: opts.model ?? "", user_id: opts.userId ?? "",
    });
  }

  /** The prompt for the next LLM call, rendered for `renderFormat` (default openai-chat). */
  async prepareRequest(agentId: string, opts: PrepareOptions = {}): Promise<Prompt> {
    const format = opts.renderFormat === undefined ? "openai-chat" : opts.renderFormat;
    if (format !== null && !(format in FORMATS)) {
      throw new Error(`renderFormat must be one of ${Object.keys(FORMATS).join(", ")} or null`);
    }
    const userInput = typeof opts.userInput === "string" ? user(opts.userInput) : opts.userInput ?? null;
    const raw = await this.call<PrepareRequestResponse__Output>("PrepareRequest", {
      agent_id: agentId,
      system_prompt: opts.systemPrompt ?? "",
      user_input: userInput,
      model: opts.model ?? "",
      render_format: format === null ? "RENDER_FORMAT_UNSPECIFIED" : FORMATS[format],
      max_output_tokens: opts.maxOutputTokens ?? 0,
      force_compaction: opts.forceCompaction ?? false,
      recall: opts.recall,
      recall_max_tokens: opts.recallMaxTokens,
      user_id: opts.userId ?? "",
      preview: opts.preview ?? false,
      strategy: opts.strategy ?? "",
      recall_as_of: opts.recallAsOf,
    });
    return {
      payload: raw.rendered_payload_json ? JSON.parse(raw.rendered_payload_json) : null,
      turnId: raw.turn_id,
      estimatedPromptTokens: raw.estimated_prompt_tokens,
      warnings: raw.warnings,
      recalled: raw.recalled,
      raw,
    };
  }

  /** A compaction now; `focus` joins the summarizer's instructions, `strategy` as in prepareRequest. */
  async compact(agentId: string, focus = "", opts: { strategy?: Strategy } = {}): Promise<CompactionReport__Output> {
    return (await this.call("Compact", { agent_id: agentId, focus, strategy: opts.strategy ?? "" })).report;
  }

  /** Memories, the raw tail and tool interactions; with `query`, the best memories of every kind in `recalled`. */
  retrieve(agentId: string, opts: RetrieveOptions = {}): Promise<RetrieveResponse__Output> {
    return this.call("Retrieve", {
      agent_id: agentId,
      user_id: opts.userId ?? "",
      query: opts.query ?? "",
      max_episodic: opts.maxEpisodic,
      max_semantic: opts.maxSemantic,
      raw_tail_turns: opts.rawTailTurns,
      include_tool_interactions: opts.includeToolInteractions ?? false,
      max_recalled: opts.maxRecalled,
      context_messages: opts.contextMessages ?? 0,
      wait_for_index_ms: opts.waitForIndexMs ?? 0,
      as_of: opts.asOf,
    });
  }

  /** Traces by relevance to `query` (mode "ranked", the default) or containing all its words ("match-all-words"). */
  async searchHistory(agentId: string, query: string, opts: SearchOptions = {}): Promise<SearchHistoryResponse__Output> {
    if (opts.mode !== undefined && !(opts.mode in SEARCH_MODES)) {
      throw new Error(`mode must be one of ${Object.keys(SEARCH_MODES).join(", ")}`);
    }
    const traceTypes = (opts.traceTypes ?? []).map((kind) => {
      if (!(kind in TRACE_KINDS)) throw new Error(`traceTypes take ${Object.keys(TRACE_KINDS).join(", ")}, not ${kind}`);
      return TRACE_KINDS[kind];
    });
    return this.call("SearchHistory", {
      agent_id: agentId,
      user_id: opts.userId ?? "",
      query,
      limit: opts.limit ?? 0,
      page_token: opts.pageToken ?? "",
      mode: opts.mode === undefined ? "SEARCH_MODE_UNSPECIFIED" : SEARCH_MODES[opts.mode],
      trace_types: traceTypes,
      from_turn_id: opts.fromTurnId ?? "",
      to_turn_id: opts.toTurnId ?? "",
      from_ts: opts.fromTs,
      to_ts: opts.toTs,
      context_messages: opts.contextMessages ?? 0,
      wait_for_index_ms: opts.waitForIndexMs ?? 0,
      as_of: opts.asOf,
    });
  }

  contextStats(agentId: string, model = ""): Promise<GetContextStatsResponse__Output> {
    return this.call("GetContextStats", { agent_id: agentId, model });
  }

  /** The agent's compaction log, newest first: each compaction that changed the prompt or failed. */
  async listCompactions(agentId: string, pageSize = 0): Promise<CompactionRecord__Output[]> {
    const records: CompactionRecord__Output[] = [];
    let token = "";
    do {
      const page = await this.call("ListCompactions", { agent_id: agentId, page_size: pageSize, page_token: token });
      records.push(...page.compactions);
      token = page.next_page_token;
    } while (token);
    return records;
  }

  /** Every agent id the caller may see (of `userId` only, containing `idContains`, when given), following pages. */
  async listAgents(pageSize = 0, userId = "", idContains = ""): Promise<string[]> {
    const ids: string[] = [];
    let token = "";
    do {
      const page = await this.call("ListAgents", { page_size: pageSize, page_token: token, user_id: userId, id_contains: idContains });
      ids.push(...page.agent_ids);
      token = page.next_page_token;
    } while (token);
    return ids;
  }

  /** Every user id the caller may see (with memory here: an agent bound, blocks, facts). */
  async listUsers(pageSize = 0): Promise<string[]> {
    const ids: string[] = [];
    let token = "";
    do {
      const page = await this.call("ListUsers", { page_size: pageSize, page_token: token });
      ids.push(...page.user_ids);
      token = page.next_page_token;
    } while (token);
    return ids;
  }

  async deleteAgent(agentId: string): Promise<void> {
    await this.call("DeleteAgent", { agent_id: agentId });
  }

  async forkAgent(sourceAgentId: string, targetAgentId: string): Promise<string> {
    return (await this.call("ForkAgent", { source_agent_id: sourceAgentId, target_agent_id: targetAgentId })).agent_id;
  }

  /** Erases everything the user owns; the number of agents erased. */
  async deleteUser(userId: string): Promise<number> {
    return (await this.call("DeleteUser", { user_id: userId })).agents_deleted;
  }

  /** Reconciles the user's facts across its conversations now: the same fact
   * said in other words merged (every source kept), facts on one subject put
   * to the summarizer (which replaces which, which ended); pinned and
   * client-written facts never change. The run as logged (`seq`, `trigger`
   * "request", `merged`/`replaced`/`invalidated`/`unchanged`, `groups_asked`,
   * `summarizer`, `changes`); `seq` 0 for a user with no facts (nothing to
   * do, nothing logged). */
  async consolidateUser(userId: string): Promise<Consolidation__Output> {
    return (await this.call("ConsolidateUser", { user_id: userId })).consolidation;
  }

  /** The user's consolidation runs, newest first: the latest `pageSize` (20
   * when unset, at most 100; the latest 100 are kept), by request or after a
   * conversation of the user went idle. */
  async listConsolidations(userId: string, pageSize = 0): Promise<Consolidation__Output[]> {
    return (await this.call("ListConsolidations", { user_id: userId, page_size: pageSize })).consolidations;
  }

  /** The current memory blocks of a scope, by label. */
  async listBlocks(scope: Scope): Promise<MemoryBlock__Output[]> {
    return (await this.call("ListMemoryBlocks", { scope: scopeOf(scope) })).blocks;
  }

  /** One block (`block`), and with `includeHistory` every version, oldest first (`history`). */
  getBlock(scope: Scope, label: string, includeHistory = false): Promise<GetMemoryBlockResponse__Output> {
    return this.call("GetMemoryBlock", { scope: scopeOf(scope), label, include_history: includeHistory });
  }

  /** Creates or replaces a block. */
  async putBlock(scope: Scope, label: string, value: string, opts: PutBlockOptions = {}): Promise<MemoryBlock__Output> {
    if (opts.format !== undefined && !(opts.format in BLOCK_FORMATS)) {
      throw new Error(`format must be one of ${Object.keys(BLOCK_FORMATS).join(", ")}`);
    }
    return (await this.call("PutMemoryBlock", {
      scope: scopeOf(scope),
      label,
      value,
      format: opts.format === undefined ? "BLOCK_FORMAT_UNSPECIFIED" : BLOCK_FORMATS[opts.format],
      description: opts.description,
      limit_chars: opts.limitChars ?? 0,
      read_only: opts.readOnly,
      expected_version: opts.expectedVersion,
      user_id: opts.agentUserId ?? "",
    })).block;
  }

  /** One edit: append, replace (`old` must occur exactly once), insert (after
   * line `line`, 0 the top) or a JSON merge patch (starts a missing block
   * from {}: how working memory begins). */
  async editBlock(scope: Scope, label: string, edit: BlockEdit,
    opts: { expectedVersion?: number; agentUserId?: string } = {}): Promise<MemoryBlock__Output> {
    return (await this.call("EditMemoryBlock", {
      scope: scopeOf(scope),
      label,
      edit: editOf(edit),
      expected_version: opts.expectedVersion,
      user_id: opts.agentUserId ?? "",
    })).block;
  }

  /** Deletes a block; the version that deleted it. */
  async deleteBlock(scope: Scope, label: string, expectedVersion?: number): Promise<number> {
    return (await this.call("DeleteMemoryBlock", {
      scope: scopeOf(scope), label, expected_version: expectedVersion,
    })).version;
  }

  /** Adds facts; one result each (`id`, `outcome` ADD_OUTCOME_ADDED, or
   * ADD_OUTCOME_MERGED when the same fact was there and was updated, `version`). */
  async addMemories(scope: FactScope, memories: NewMemory[]): Promise<AddedMemory__Output[]> {
    const items = memories.map((m) => {
      const fact = typeof m === "string" ? { text: m } : m;
      return {
        text: fact.text, tags: fact.tags ?? [], pinned: fact.pinned ?? false,
        expires_at: fact.expiresAt, metadata: fact.metadata ?? {}, valid_from: fact.validFrom,
      };
    });
    return (await this.call("AddMemories", { scope: scopeOf(scope), memories: items })).results;
  }

  /** Every fact of the scope the options select: pinned first, then newest
   * first (following pages). */
  async listMemories(scope: FactScope, opts: ListMemoriesOptions = {}): Promise<SemanticItem__Output[]> {
    const out: SemanticItem__Output[] = [];
    let token = "";
    do {
      const page = await this.call("ListMemories", {
        scope: scopeOf(scope), query: opts.query ?? "", tags: opts.tags ?? [],
        include_superseded: opts.includeSuperseded ?? false, include_expired: opts.includeExpired ?? false,
        page_size: opts.pageSize ?? 0, page_token: token, source_agent_id: opts.sourceAgentId ?? "",
        as_of: opts.asOf,
      });
      out.push(...page.memories);
      token = page.next_page_token;
    } while (token);
    return out;
  }

  async getMemory(scope: FactScope, id: string): Promise<SemanticItem__Output> {
    return (await this.call("GetMemory", { scope: scopeOf(scope), id })).memory;
  }

  /** Every version of a fact, oldest first (a deletion last, with no text). */
  async memoryHistory(scope: FactScope, id: string): Promise<SemanticItem__Output[]> {
    return (await this.call("GetMemoryHistory", { scope: scopeOf(scope), id })).versions;
  }

  /** A new version of a fact. */
  async updateMemory(scope: FactScope, id: string, opts: UpdateMemoryOptions): Promise<SemanticItem__Output> {
    return (await this.call("UpdateMemory", {
      scope: scopeOf(scope), id, text: opts.text,
      tags: opts.tags === undefined ? undefined : { values: opts.tags },
      pinned: opts.pinned, expires_at: opts.expiresAt,
      metadata: opts.metadata === undefined ? undefined : { entries: opts.metadata },
      expected_version: opts.expectedVersion ?? 0, valid_from: opts.validFrom,
    })).memory;
  }

  /** Deletes a fact (no text of it is left); the version that deleted it. */
  async deleteMemory(scope: FactScope, id: string, expectedVersion = 0): Promise<number> {
    return (await this.call("DeleteMemory", {
      scope: scopeOf(scope), id, expected_version: expectedVersion,
    })).version;
  }

  /** Forgets a turn: its traces erased everywhere Engram keeps them, the
   * facts drawn from them deleted, the summaries that covered them
   * rewritten from their other turns (hidden until then). */
  async forgetTurn(agentId: string, turnId: string): Promise<ForgetResponse__Output> {
    return this.call("ForgetTurn", { agent_id: agentId, turn_id: turnId });
  }

  /** As forgetTurn, for some traces: trace ids or your event ids (a tool
   * call and its result go together). */
  async forgetEvents(agentId: string, ids: string[]): Promise<ForgetResponse__Output> {
    return this.call("ForgetEvents", { agent_id: agentId, ids });
  }

  /** An agent's or a user's memory as a bundle of JSON lines (docs/EXPORT.md):
   * every trace, summary, fact version and block version, ids and times kept. */
  exportMemory(scope: FactScope): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + this.timeoutMs);
      const pieces: Buffer[] = [];
      const call = this.stub.ExportMemory({ scope: scopeOf(scope) }, { deadline });
      call.on("data", (piece: { lines: Buffer }) => pieces.push(Buffer.from(piece.lines)));
      call.on("error", reject);
      call.on("end", () => resolve(Buffer.concat(pieces)));
    });
  }

  /** Recreates an exported bundle; all of it is checked before anything is
   * written. ALREADY_EXISTS for an agent (or a user's memory) that exists,
   * unless `replace`. Sent in pieces of at most 1 MiB. */
  importMemory(bundle: Uint8Array, opts: { replace?: boolean } = {}): Promise<ImportMemoryResponse__Output> {
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + this.timeoutMs);
      const call = this.stub.ImportMemory({ deadline }, (err: grpc.ServiceError | null, res: ImportMemoryResponse__Output) =>
        err ? reject(err) : resolve(res));
      const piece = 1 << 20;
      for (let at = 0; at === 0 || at < bundle.length; at += piece) {
        // `replace` is read from the first message.
        call.write({ lines: Buffer.from(bundle.subarray(at, at + piece)), replace: at === 0 && (opts.replace ?? false) });
      }
      call.end();
    });
  }
}
