/**
 * Engram's Node/TypeScript client: a thin promise-based wrapper over
 * @grpc/grpc-js with the service loaded from engram's .proto files at run
 * time (copied into ./proto by `npm run build`, which also generates the
 * message types in src/generated; ENGRAM_PROTO_DIR or the `protoDir` option
 * point elsewhere).
 *
 * Errors reject with grpc-js's ServiceError: `err.code` is a grpc.status.
 */
import * as path from "node:path";
import * as fs from "node:fs";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
// Types generated from the protos by proto-loader-gen-types (`npm run proto`).
import type { CompactionReport__Output } from "./generated/engram/v1/CompactionReport";
import type { GetContextStatsResponse__Output } from "./generated/engram/v1/GetContextStatsResponse";
import type { IngestResponse__Output } from "./generated/engram/v1/IngestResponse";
import type { PrepareRequestResponse__Output } from "./generated/engram/v1/PrepareRequestResponse";
import type { RetrieveResponse__Output } from "./generated/engram/v1/RetrieveResponse";
import type { SearchHistoryResponse__Output } from "./generated/engram/v1/SearchHistoryResponse";

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

/** An event to ingest; build one with user(), assistant(), toolCall(), toolResult(). */
export interface TraceEvent {
  trace_type: TraceType;
  content?: string;
  event_id?: string;
  tool_name?: string;
  tool_call_id?: string;
  tool_args?: PbStruct;
  tool_result?: PbValue;
  tool_error?: string;
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

export const user = (content: string, eventId = ""): TraceEvent =>
  ({ trace_type: "TRACE_TYPE_USER", content, event_id: eventId });
export const assistant = (content: string, eventId = ""): TraceEvent =>
  ({ trace_type: "TRACE_TYPE_ASSISTANT", content, event_id: eventId });
export const toolCall = (callId: string, name: string, args: { [key: string]: Json } = {}): TraceEvent =>
  ({ trace_type: "TRACE_TYPE_TOOL_CALL", tool_call_id: callId, tool_name: name, tool_args: toStruct(args) });
export const toolResult = (callId: string, result: Json, opts: { name?: string; error?: string } = {}): TraceEvent =>
  ({ trace_type: "TRACE_TYPE_TOOL_RESULT", tool_call_id: callId, tool_result: toValue(result),
     tool_name: opts.name ?? "", tool_error: opts.error ?? "" });

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
  userInput?: string | TraceEvent;
  systemPrompt?: string;
  model?: string;
  renderFormat?: RenderFormat;
  maxOutputTokens?: number;
  forceCompaction?: boolean;
}

/** PrepareRequest's answer, with the rendered body decoded. */
export interface Prompt {
  /** The provider request body (parsed JSON), or null without a render format. */
  payload: any | null;
  turnId: string;
  estimatedPromptTokens: number;
  warnings: string[];
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

export class EngramClient {
  private readonly stub: any;
  private readonly metadata = new grpc.Metadata();
  private readonly timeoutMs: number;

  /** `target` is host:port, e.g. "127.0.0.1:50051". */
  constructor(target = "127.0.0.1:50051", opts: ClientOptions = {}) {
    const protoDir = opts.protoDir ?? process.env.ENGRAM_PROTO_DIR ?? path.join(__dirname, "..", "..", "proto");
    const Service = loadService(protoDir);
    const creds = opts.tlsCa !== undefined
      ? grpc.credentials.createSsl(pem(opts.tlsCa), pem(opts.clientKey), pem(opts.clientCert))
      : grpc.credentials.createInsecure();
    if (opts.token) this.metadata.set("authorization", `Bearer ${opts.token}`);
    this.stub = new Service(target, creds);
    this.timeoutMs = opts.timeoutMs ?? 30_000;
  }

  close(): void {
    this.stub.close();
  }

  private call<T = any>(method: string, request: object): Promise<T> {
    return new Promise((resolve, reject) => {
      const deadline = new Date(Date.now() + this.timeoutMs);
      this.stub[method](request, this.metadata, { deadline }, (err: grpc.ServiceError | null, res: T) =>
        err ? reject(err) : resolve(res));
    });
  }

  /** Stores events; `usage` is what the provider reported for the call that made them. */
  ingest(agentId: string, events: TraceEvent[], opts: { usage?: Usage; model?: string } = {}): Promise<IngestResponse__Output> {
    return this.call("Ingest", { agent_id: agentId, events, usage: opts.usage ?? null, model: opts.model ?? "" });
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
    });
    return {
      payload: raw.rendered_payload_json ? JSON.parse(raw.rendered_payload_json) : null,
      turnId: raw.turn_id,
      estimatedPromptTokens: raw.estimated_prompt_tokens,
      warnings: raw.warnings,
      raw,
    };
  }

  async compact(agentId: string, focus = ""): Promise<CompactionReport__Output> {
    return (await this.call("Compact", { agent_id: agentId, focus })).report;
  }

  retrieve(agentId: string, opts: { query?: string; maxEpisodic?: number; maxSemantic?: number;
    rawTailTurns?: number; includeToolInteractions?: boolean } = {}): Promise<RetrieveResponse__Output> {
    return this.call("Retrieve", {
      agent_id: agentId,
      query: opts.query ?? "",
      max_episodic: opts.maxEpisodic,
      max_semantic: opts.maxSemantic,
      raw_tail_turns: opts.rawTailTurns,
      include_tool_interactions: opts.includeToolInteractions ?? false,
    });
  }

  searchHistory(agentId: string, query: string, opts: { limit?: number; pageToken?: string } = {}): Promise<SearchHistoryResponse__Output> {
    return this.call("SearchHistory", { agent_id: agentId, query, limit: opts.limit ?? 0, page_token: opts.pageToken ?? "" });
  }

  contextStats(agentId: string, model = ""): Promise<GetContextStatsResponse__Output> {
    return this.call("GetContextStats", { agent_id: agentId, model });
  }

  /** Every agent id the caller may see, following pages. */
  async listAgents(pageSize = 0): Promise<string[]> {
    const ids: string[] = [];
    let token = "";
    do {
      const page = await this.call("ListAgents", { page_size: pageSize, page_token: token });
      ids.push(...page.agent_ids);
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
}
