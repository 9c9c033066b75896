/** Every request field of the API can be set through the client.
 *
 * The fields come from proto/engram/v1/*.proto itself. Each helper is called
 * with every option set to a value that is not the field's default, through
 * a stand-in for the grpc-js client that serializes the request as grpc-js
 * would and keeps the bytes; the fields found on the wire are compared with
 * the proto's. A field of the proto that no call puts on the wire (the
 * helper lacks it, or names it wrongly, so it is dropped) fails here, naming
 * it: add it to the helper (src/index.ts) and to the calls below. */
import { test } from "node:test";
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

import { EngramClient, assistant, toolCall, toolResult, user } from "../src";

const PROTO_DIR = path.resolve(__dirname, "..", "..", "..", "..", "proto");

interface Field { name: string; type: string; number: number }
type Messages = Map<string, Field[]>;

/** Messages (fields with their numbers) and rpcs (request message) from the .proto files. */
export function parseProtos(dir = PROTO_DIR): { messages: Messages; rpcs: Map<string, string> } {
  const messages: Messages = new Map();
  const rpcs = new Map<string, string>();
  const v1 = path.join(dir, "engram", "v1");
  const files = fs.readdirSync(v1).filter((f) => f.endsWith(".proto")).sort();
  assert.ok(files.length > 0, `no .proto files under ${v1}`);
  for (const file of files) {
    const text = fs.readFileSync(path.join(v1, file), "utf8").replace(/\/\/[^\n]*/g, "");
    for (const m of text.matchAll(/\brpc\s+(\w+)\s*\(\s*(?:stream\s+)?([\w.]+)\s*\)/g)) rpcs.set(m[1], m[2]);
    for (const m of text.matchAll(/^(message|enum|service)\s+(\w+)\s*\{/gm)) {
      let depth = 1;
      let i = m.index! + m[0].length;
      for (; depth > 0; i++) depth += text[i] === "{" ? 1 : text[i] === "}" ? -1 : 0;
      const body = text.slice(m.index! + m[0].length, i - 1);
      if (m[1] !== "message") continue;
      assert.doesNotMatch(body, /\b(message|enum)\s+\w+\s*\{/, `nested types in ${m[2]}: teach this parser about them`);
      messages.set(m[2], [...body.matchAll(/^\s*(?:optional\s+|repeated\s+)?(map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*(\d+)/gm)]
        .map((f) => ({ type: f[1], name: f[2], number: Number(f[3]) })));
    }
  }
  return { messages, rpcs };
}

/** Field number -> values (length-delimited ones as bytes) of one serialized message. */
function onWire(buf: Uint8Array): Map<number, Uint8Array[]> {
  const out = new Map<number, Uint8Array[]>();
  let i = 0;
  const varint = () => {
    let value = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const b = buf[i++];
      value |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return value;
    }
  };
  while (i < buf.length) {
    const key = varint();
    const number = Number(key >> 3n);
    const wire = Number(key & 7n);
    let value: Uint8Array = new Uint8Array();
    if (wire === 0) varint();
    else if (wire === 1) i += 8;
    else if (wire === 5) i += 4;
    else if (wire === 2) {
      const len = Number(varint());
      value = buf.subarray(i, i + len);
      i += len;
    } else throw new Error(`wire type ${wire} not expected`);
    out.set(number, [...(out.get(number) ?? []), value]);
  }
  return out;
}

/** Fields of message `name` missing from `bytes`, following message fields of
 * our own types (but TraceEvent, which the event helpers cover). */
function unsetFields(name: string, bytes: Uint8Array, messages: Messages): Set<string> {
  const present = onWire(bytes);
  const missing = new Set<string>();
  for (const field of messages.get(name)!) {
    const values = present.get(field.number);
    if (!values) missing.add(`${name}.${field.name}`);
    else if (messages.has(field.type) && field.type !== "TraceEvent") {
      for (const value of values) for (const m of unsetFields(field.type, value, messages)) missing.add(m);
    }
  }
  return missing;
}

function serviceDefinition(): grpc.ServiceDefinition {
  const definition = protoLoader.loadSync(path.join(PROTO_DIR, "engram", "v1", "service.proto"), {
    includeDirs: [PROTO_DIR], keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true,
  });
  return (grpc.loadPackageDefinition(definition) as any).engram.v1.MemoryService.service;
}

/** Stands in for the grpc-js client: serializes each request, answers an
 * empty response (ListAgents: a second page, so the page token is followed). */
function recorder(service: grpc.ServiceDefinition) {
  const requests = new Map<string, Uint8Array[]>();
  const stub = new Proxy({}, {
    get: (_target, method: string) => (request: object, ...rest: any[]) => {
      const sent = requests.get(method) ?? [];
      requests.set(method, sent);
      if (method === "ExportMemory") {
        // A stream of answers: none, then its end.
        sent.push(service[method].requestSerialize(request));
        const handlers: Record<string, (...a: any[]) => void> = {};
        setImmediate(() => handlers.end?.());
        return { on: (event: string, f: (...a: any[]) => void) => { handlers[event] = f; } };
      }
      if (method === "ImportMemory") {
        // A stream of requests, answered once it ends.
        const done = rest[rest.length - 1];
        return {
          write: (message: object) => sent.push(service[method].requestSerialize(message)),
          end: () => done(null, { agents: 0, facts: 0, blocks: 0 }),
        };
      }
      sent.push(service[method].requestSerialize(request));
      rest[rest.length - 1](null, {
        report: {}, agent_id: "b", agent_ids: [], user_ids: [], rendered_payload_json: "", warnings: [], recalled: [],
        blocks: [], block: {}, agents_deleted: 0, compactions: [], consolidation: {}, consolidations: [], version: 0, results: [], memories: [], memory: {}, versions: [],
        next_page_token: ["ListAgents", "ListUsers", "ListMemories", "ListCompactions"].includes(method) && sent.length === 1 ? "page-2" : "",
      });
    },
  });
  return { stub, requests };
}

/** Facts belong to an agent or a user: the server refuses the global scope
 * for them, so their helpers have no way to ask for it. */
const NOT_ASKABLE = new Set(["AddMemories", "ListMemories", "GetMemory", "GetMemoryHistory", "UpdateMemory", "DeleteMemory", "ExportMemory"]
  .map((rpc) => `${rpc}:MemoryScope.global`));

/** Each RPC's helper with every option set (none to its default). */
async function callEveryHelper(engram: EngramClient) {
  await engram.ingest("a", [user("hi")], { model: "m", usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 }, userId: "u" });
  await engram.prepareRequest("a", {
    userInput: "hi", systemPrompt: "s", model: "m", renderFormat: "gemini", maxOutputTokens: 5,
    forceCompaction: true, recall: false, recallMaxTokens: 7, userId: "u", strategy: "trim",
    recallAsOf: 8,
  });
  await engram.prepareRequest("a", { model: "m", preview: true });
  await engram.compact("a", "f", { strategy: "trim" });
  await engram.retrieve("a", {
    query: "q", maxEpisodic: 1, maxSemantic: 2, rawTailTurns: 3, includeToolInteractions: true,
    maxRecalled: 4, contextMessages: 5, waitForIndexMs: 6, userId: "u", asOf: 7,
  });
  await engram.searchHistory("a", "q", {
    limit: 1, pageToken: "p", mode: "match-all-words", traceTypes: ["user"], fromTurnId: "turn_0001",
    toTurnId: "turn_0002", fromTs: 1, toTs: 2, contextMessages: 3, waitForIndexMs: 4, userId: "u",
    asOf: 5,
  });
  await engram.contextStats("a", "m");
  await engram.listCompactions("a", 1);
  await engram.listAgents(1, "u", "a");
  await engram.listUsers(1);
  await engram.deleteAgent("a");
  await engram.forkAgent("a", "b");
  await engram.deleteUser("u");
  await engram.consolidateUser("u");
  await engram.listConsolidations("u", 1);
  // Each scope once: a oneof's fields count when any call sets them.
  for (const scope of [{ agentId: "a" }, { userId: "u" }, { global: true as const }]) {
    await engram.listBlocks(scope);
    await engram.getBlock(scope, "l", true);
    await engram.deleteBlock(scope, "l", 1);
    await engram.putBlock(scope, "l", "v");
  }
  await engram.putBlock({ agentId: "a" }, "l", "v", {
    format: "json", description: "d", limitChars: 9, readOnly: true, expectedVersion: 0, agentUserId: "u",
  });
  await engram.editBlock({ agentId: "a" }, "l", { append: "x" }, { expectedVersion: 1, agentUserId: "u" });
  await engram.editBlock({ userId: "u" }, "l", { replace: { old: "x", new: "y" } });
  await engram.editBlock({ global: true }, "l", { insert: { line: 1, text: "z" } });
  await engram.editBlock({ agentId: "a" }, "l", { jsonMergePatch: { k: 1 } });
  for (const scope of [{ agentId: "a" }, { userId: "u" }]) {
    await engram.addMemories(scope, [{ text: "t", tags: ["x"], pinned: true, expiresAt: 9, metadata: { k: "v" }, validFrom: 8 }]);
    await engram.listMemories(scope, { query: "q", tags: ["x"], includeSuperseded: true, includeExpired: true, pageSize: 5, asOf: 7 });
    await engram.getMemory(scope, "m");
    await engram.memoryHistory(scope, "m");
    await engram.updateMemory(scope, "m", {
      text: "t", tags: ["x"], pinned: true, expiresAt: 9, metadata: { k: "v" }, expectedVersion: 2, validFrom: 6,
    });
    await engram.deleteMemory(scope, "m", 3);
  }
  await engram.listMemories({ userId: "u" }, { sourceAgentId: "a" });
  await engram.forgetTurn("a", "turn_0001");
  await engram.forgetEvents("a", ["e1"]);
  for (const scope of [{ agentId: "a" }, { userId: "u" }]) await engram.exportMemory(scope);
  await engram.importMemory(Buffer.from("{}\n"), { replace: true });
}

const EVERY = { eventId: "e1", ts: 1683532800, turnId: "turn_0001", sourceEvent: "cli", correlationId: "c1", tags: ["t"] };
const MEDIA = { images: ["https://example.com/a.png"], audio: ["https://example.com/a.mp3"], video: ["https://example.com/a.mp4"] };
const TOOL_FIELDS = ["tool_name", "tool_call_id", "tool_args", "tool_result", "tool_error"];
/** Each event helper with every option set, and the TraceEvent fields that
 * do not belong to its kind of event. */
const EVENT_HELPERS: Record<string, [() => object, string[]]> = {
  user: [() => user("hi", { name: "Caroline", media: MEDIA, ...EVERY }), TOOL_FIELDS],
  assistant: [() => assistant("hi", { name: "Mel", media: MEDIA, ...EVERY }), TOOL_FIELDS],
  toolCall: [() => toolCall("c1", "get_weather", { city: "Paris" }, EVERY),
    ["content", "media", "name", "tool_result", "tool_error"]],
  toolResult: [() => toolResult("c1", { temp_c: 18 }, { name: "get_weather", error: "failed", ...EVERY }),
    ["content", "media", "name", "tool_args"]],
};

test("the parser reads the protos", () => {
  const { messages, rpcs } = parseProtos();
  assert.equal(rpcs.get("PrepareRequest"), "PrepareRequestRequest");
  assert.ok(messages.get("SearchHistoryRequest")!.some((f) => f.name === "wait_for_index_ms"));
  assert.ok(messages.get("TraceEvent")!.length >= 15);
  // The parser misses no rpc and no field: proto-loader's reading agrees.
  const service = serviceDefinition();
  assert.deepEqual([...rpcs.keys()].sort(), Object.keys(service).sort());
  const definition = protoLoader.loadSync(path.join(PROTO_DIR, "engram", "v1", "service.proto"), { includeDirs: [PROTO_DIR], keepCase: true });
  for (const request of rpcs.values()) {
    const type = (definition[`engram.v1.${request}`] as any).type;
    assert.deepEqual(messages.get(request)!.map((f) => f.name).sort(), type.field.map((f: any) => f.name).sort());
  }
});

test("every request field has a helper", async () => {
  const { messages, rpcs } = parseProtos();
  const engram = new EngramClient("127.0.0.1:1");
  engram.close();
  const { stub, requests } = recorder(serviceDefinition());
  (engram as any).stub = stub;
  await callEveryHelper(engram);
  const missing: string[] = [];
  for (const [rpc, request] of rpcs) {
    const sent = requests.get(rpc);
    assert.ok(sent, `EngramClient has no helper for ${rpc}`);
    // A field counts when any of the helper's calls sent it.
    const unset = sent.map((bytes) => unsetFields(request, bytes, messages));
    missing.push(...[...unset[0]].filter((f) => unset.every((u) => u.has(f)) && !NOT_ASKABLE.has(`${rpc}:${f}`)));
  }
  assert.deepEqual(missing.sort(), [], `request fields the Node client cannot set: ${missing.join(", ")}`);
});

test("every event field has a helper", () => {
  const { messages } = parseProtos();
  const ingest = serviceDefinition().Ingest;
  const eventsField = messages.get("IngestRequest")!.find((f) => f.name === "events")!.number;
  const missing: string[] = [];
  for (const [helper, [make, otherKinds]] of Object.entries(EVENT_HELPERS)) {
    const events = onWire(ingest.requestSerialize({ agent_id: "a", events: [make()] })).get(eventsField)!;
    for (const field of unsetFields("TraceEvent", events[0], messages)) {
      const [type, name] = field.split(".");
      if (type !== "TraceEvent" || !otherKinds.includes(name)) missing.push(`${helper}(): ${field}`);
    }
  }
  assert.deepEqual(missing.sort(), [], `TraceEvent fields the event helpers cannot set: ${missing.join(", ")}`);
});
