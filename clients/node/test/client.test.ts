import { test } from "node:test";
import * as assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";

import { EngramClient, SearchOptions, assistant, fromStruct, fromValue, status, toolCall, toolResult, user } from "../src";
import { TOOLS, runAgent } from "../examples/agent_loop";
import { fakeLlm, startEngramd } from "./harness";

test("the example agent loop runs tools through Engram", async () => {
  const server = await startEngramd();
  const llm = await fakeLlm();
  const engram = new EngramClient(server.addr);
  try {
    const text = await runAgent(engram, "node-example", "Weather in Oslo?", { llmUrl: llm.baseUrl, model: "gpt-4o-mini" });
    assert.equal(text, "It is 12 C in Oslo.");
    assert.deepEqual(llm.seen.map((s) => s.path), ["/v1/chat/completions", "/v1/chat/completions"]);
    const second = llm.seen[1].body;
    assert.deepEqual(second.messages.map((m: any) => m.role), ["system", "user", "assistant", "tool"]);
    assert.equal(second.messages[2].tool_calls[0].function.name, "get_weather");
    assert.deepEqual(second.tools, TOOLS);
    const stats = await engram.contextStats("node-example");
    assert.equal(stats.turns, 1);
    assert.equal(stats.messages, 5);
    const hits = await engram.searchHistory("node-example", "Oslo");
    assert.ok(hits.matches.some((m: any) => m.trace.content.includes("12 C")));
  } finally {
    engram.close();
    await llm.close();
    await server.stop();
  }
});

test("the wrapper covers the API", async () => {
  const server = await startEngramd();
  const engram = new EngramClient(server.addr);
  try {
    const out = await engram.ingest("node-api", [
      user("I like green tea", "e1"),
      toolCall("c1", "lookup", { q: "tea", n: 2 }),
      toolResult("c1", { found: ["sencha"] }, { name: "lookup" }),
      assistant("Sencha is green tea."),
    ], { usage: { prompt_tokens: 50, completion_tokens: 5, total_tokens: 55 }, model: "gpt-4o-mini" });
    assert.deepEqual(out.traces.map((t: any) => t.seq), [0, 1, 2, 3]);
    assert.deepEqual(fromStruct(out.traces[1].tool_args), { q: "tea", n: 2 });
    assert.deepEqual(fromValue(out.traces[2].tool_result), { found: ["sencha"] });
    const again = await engram.ingest("node-api", [user("I like green tea", "e1")]);
    assert.equal(again.traces[0].id, out.traces[0].id, "event_id makes retries idempotent");

    const prompt = await engram.prepareRequest("node-api", { model: "gemini-2.5-flash", renderFormat: "gemini" });
    assert.equal(prompt.payload.contents[0].role, "user");
    assert.equal((await engram.prepareRequest("node-api", { renderFormat: null })).payload, null);
    await assert.rejects(engram.prepareRequest("node-api", { renderFormat: "cohere" as any }), /renderFormat/);

    const tail = await engram.retrieve("node-api", { includeToolInteractions: true });
    assert.equal(tail.tool_interactions[0].tool_name, "lookup");
    assert.equal(await engram.forkAgent("node-api", "node-api-copy"), "node-api-copy");
    assert.deepEqual(await engram.listAgents(1), ["node-api", "node-api-copy"]);
    await engram.deleteAgent("node-api-copy");
    assert.deepEqual(await engram.listAgents(), ["node-api"]);
    const report = await engram.compact("node-api");
    assert.equal(report.performed, false);
    assert.match(report.error, /nothing to compact/);
    await assert.rejects(engram.ingest("bad id!", [user("x")]), (e: any) => e.code === status.INVALID_ARGUMENT);
  } finally {
    engram.close();
    await server.stop();
  }
});

test("tokens are sent and checked", async () => {
  const token = "node-team-token-0123456789";
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "engram-tokens-"));
  const file = path.join(dir, "tokens.toml");
  const digest = createHash("sha256").update(token).digest("hex");
  fs.writeFileSync(file, `[[tokens]]\nname = "node"\ntoken_sha256 = "${digest}"\nagents = ["node-*"]\n`);
  const server = await startEngramd({ ENGRAM__AUTH__TOKENS_FILE: file });
  const scoped = new EngramClient(server.addr, { token });
  const anonymous = new EngramClient(server.addr);
  const wrong = new EngramClient(server.addr, { token: "not-the-token-at-all" });
  try {
    await scoped.ingest("node-scoped", [user("hi")]);
    await assert.rejects(scoped.ingest("other-agent", [user("hi")]), (e: any) => e.code === status.PERMISSION_DENIED);
    // The raw grpc-js client on the same channel sends the token too.
    const listed: any = await new Promise((resolve, reject) =>
      scoped.stub.ListAgents({}, (err: any, res: any) => (err ? reject(err) : resolve(res))));
    assert.deepEqual(listed.agent_ids, ["node-scoped"]);
    for (const client of [anonymous, wrong]) {
      await assert.rejects(client.ingest("node-scoped", [user("hi")]), (e: any) => e.code === status.UNAUTHENTICATED);
    }
  } finally {
    for (const c of [scoped, anonymous, wrong]) c.close();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("TLS with a client certificate (mTLS)", async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "engram-pki-"));
  execFileSync("bash", [path.join(__dirname, "..", "..", "..", "..", "scripts", "test_pki.sh"), dir]);
  const file = (name: string) => path.join(dir, name);
  const server = await startEngramd({
    ENGRAM__SERVER__TLS_CERT: file("server.pem"),
    ENGRAM__SERVER__TLS_KEY: file("server.key"),
    ENGRAM__SERVER__TLS_CLIENT_CA: file("ca.pem"),
  });
  const target = `localhost:${server.addr.split(":").pop()}`;
  const mtls = new EngramClient(target, { tlsCa: file("ca.pem"), clientCert: file("client.pem"), clientKey: file("client.key") });
  const anonymous = new EngramClient(target, { tlsCa: file("ca.pem"), timeoutMs: 5000 });
  try {
    await mtls.ingest("node-tls", [user("over mTLS")]);
    assert.deepEqual(await mtls.listAgents(), ["node-tls"]);
    await assert.rejects(anonymous.ingest("node-tls", [user("no client certificate")]),
      (e: any) => e.code === status.UNAVAILABLE);
  } finally {
    mtls.close();
    anonymous.close();
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("event fields and search options reach the server", async () => {
  const server = await startEngramd();
  const engram = new EngramClient(server.addr);
  try {
    const may = 1683532800; // 2023-05-08
    const out = await engram.ingest("node-fields", [
      user("My dog Biscuit loves the beach.", { name: "Caroline", eventId: "f1", ts: may, tags: ["pets"],
        sourceEvent: "cli", correlationId: "corr-1", media: { images: ["https://example.com/biscuit.png"] } }),
      assistant("Tell me more about Biscuit!", { name: "Mel", ts: may + 60 }),
    ]);
    const first: any = out.traces[0];
    assert.deepEqual([first.name, first.ts, first.tags, first.source_event, first.correlation_id, first.media.images],
      ["Caroline", may, ["pets"], "cli", "corr-1", ["https://example.com/biscuit.png"]]);
    const body = (await engram.prepareRequest("node-fields", { model: "gpt-4o" })).payload;
    assert.equal(body.messages[0].name, "Caroline");

    const contents = async (opts: SearchOptions) =>
      (await engram.searchHistory("node-fields", "Biscuit", opts)).matches.map((m: any) => m.trace.content);
    assert.deepEqual(await contents({ mode: "match-all-words", traceTypes: ["user"] }), ["My dog Biscuit loves the beach."]);
    assert.deepEqual(await contents({ traceTypes: ["assistant"], waitForIndexMs: 10000 }), ["Tell me more about Biscuit!"]);
    assert.deepEqual(await contents({ fromTs: may + 30 }), ["Tell me more about Biscuit!"]);
    assert.deepEqual(await contents({ toTs: may + 30 }), ["My dog Biscuit loves the beach."]);
    assert.deepEqual(await contents({ fromTurnId: "turn_0002" }), []);
    const [hit]: any[] = (await engram.searchHistory("node-fields", "beach", { traceTypes: ["user"], contextMessages: 1 })).matches;
    assert.deepEqual(hit.context_after.map((t: any) => t.content), ["Tell me more about Biscuit!"]);
    await assert.rejects(engram.searchHistory("node-fields", "x", { mode: "fuzzy" as any }), /mode/);

    const recalled: any[] = (await engram.retrieve("node-fields", { query: "Biscuit", maxRecalled: 1, contextMessages: 1,
      waitForIndexMs: 10000 })).recalled;
    assert.equal(recalled.length, 1);
    assert.ok(recalled[0].context_before.length + recalled[0].context_after.length > 0);
  } finally {
    engram.close();
    await server.stop();
  }
});

test("recall can be switched off and bounded per request", async () => {
  // No raw tail: a compaction archives every finished turn, so recall has something to find.
  const server = await startEngramd({ ENGRAM__POLICY__RAW_TAIL_TURNS: "0" });
  const engram = new EngramClient(server.addr);
  try {
    await engram.ingest("node-recall", [user("My dog is called Biscuit and he loves the beach.", { name: "Caroline" }),
      assistant("Biscuit sounds lovely.")]);
    await engram.ingest("node-recall", [user("I work as a nurse."), assistant("Noted.")]);
    const report = await engram.compact("node-recall");
    assert.equal(report.performed, true);
    const [logged, ...more] = await engram.listCompactions("node-recall");
    assert.equal(more.length, 0);
    assert.deepEqual([logged.outcome, logged.report!.trigger], ["summarized", "manual"]);
    assert.equal(logged.report!.episodic_id, report.episodic_id);
    assert.deepEqual([logged.report!.tokens_before, logged.report!.tokens_after], [report.tokens_before, report.tokens_after]);
    const last = (p: any) => p.payload.messages[p.payload.messages.length - 1].content as string;
    const on = await engram.prepareRequest("node-recall", { userInput: "What is my dog called, Biscuit?", model: "gpt-4o", recall: true });
    assert.ok(on.recalled.length > 0);
    assert.match(last(on), /\[MEMORY:RECALLED\]/);
    await engram.ingest("node-recall", [assistant("Biscuit.")]);
    const off = await engram.prepareRequest("node-recall", { userInput: "And where does Biscuit like to go?", model: "gpt-4o", recall: false });
    assert.deepEqual(off.recalled, []);
    assert.doesNotMatch(last(off), /MEMORY:RECALLED/);
    await engram.ingest("node-recall", [assistant("The beach.")]);
    const tiny = await engram.prepareRequest("node-recall", { userInput: "Tell me about Biscuit again.", model: "gpt-4o", recallMaxTokens: 1 });
    assert.deepEqual(tiny.recalled, []);
  } finally {
    engram.close();
    await server.stop();
  }
});

test("users, memory blocks and working memory reach the prompt", async () => {
  const server = await startEngramd();
  const engram = new EngramClient(server.addr);
  try {
    await engram.putBlock({ global: true }, "rules", "Answer in one sentence.", { description: "house rules" });
    await engram.putBlock({ userId: "ana" }, "human", "Name: Ana.");
    const wm = await engram.editBlock({ agentId: "node-ana" }, "working_memory", { jsonMergePatch: { step: 1 } },
      { expectedVersion: 0, agentUserId: "ana" });
    assert.equal(wm.version, 1);
    assert.equal(wm.format, "BLOCK_FORMAT_JSON");
    const prompt = await engram.prepareRequest("node-ana", { userInput: "Hi", systemPrompt: "Be kind.", model: "gpt-4o" });
    const system = prompt.payload.messages[0].content as string;
    assert.ok(system.startsWith("Be kind.\n\n[MEMORY:BLOCKS]\n## rules (global): house rules"), system);
    assert.deepEqual(prompt.raw.blocks.map((b: any) => [b.scope, b.label, b.version]),
      [["global", "rules", 1], ["user", "human", 1], ["agent", "working_memory", 1]]);
    assert.equal((await engram.contextStats("node-ana")).user_id, "ana");
    await assert.rejects(engram.editBlock({ agentId: "node-ana" }, "working_memory", { jsonMergePatch: { step: 2 } },
      { expectedVersion: 0 }), (e: any) => e.code === status.ABORTED);
    await assert.rejects(engram.ingest("node-ana", [user("hi")], { userId: "bo" }),
      (e: any) => e.code === status.FAILED_PRECONDITION);
    assert.equal(await engram.deleteBlock({ global: true }, "rules"), 2);
    assert.deepEqual(await engram.listBlocks({ global: true }), []);
    await engram.editBlock({ userId: "ana" }, "human", { append: "Lives in Porto." }, { expectedVersion: 1 });
    const history = await engram.getBlock({ userId: "ana" }, "human", true);
    assert.deepEqual(history.history.map((h: any) => h.value), ["Name: Ana.", "Name: Ana.\nLives in Porto."]);
    // A user's conversations, listed and erased whole.
    await engram.ingest("node-ana-2", [user("hello again")], { userId: "ana" });
    await engram.ingest("node-bo", [user("hi")], { userId: "bo" });
    assert.deepEqual(await engram.listAgents(0, "ana"), ["node-ana", "node-ana-2"]);
    const found = await engram.searchHistory("", "hello again", { userId: "ana" });
    assert.equal(found.matches[0].agent_id, "node-ana-2");
    assert.equal(await engram.deleteUser("ana"), 2);
    assert.deepEqual(await engram.listAgents(0, "ana"), []);
    assert.deepEqual(await engram.listBlocks({ userId: "ana" }), []);
    assert.equal(await engram.deleteUser("ana"), 0);
    assert.deepEqual(await engram.listAgents(), ["node-bo"]);
  } finally {
    engram.close();
    await server.stop();
  }
});

test("facts are added, corrected, pinned and forgotten", async () => {
  const server = await startEngramd();
  const engram = new EngramClient(server.addr);
  try {
    const scope = { agentId: "node-facts" };
    const added = await engram.addMemories(scope, [
      "Lives in Oslo", { text: "Allergic to peanuts", pinned: true }, { text: "lives in OSLO", metadata: { from: "form" } },
    ]);
    assert.deepEqual(added.map((a) => a.outcome), ["ADD_OUTCOME_ADDED", "ADD_OUTCOME_ADDED", "ADD_OUTCOME_MERGED"]);
    const oslo = added[0].id;
    assert.equal(added[2].id, oslo);
    const listed = await engram.listMemories(scope);
    assert.deepEqual(listed.map((m) => m.fact), ["Allergic to peanuts", "Lives in Oslo"]);
    assert.equal(listed[1].origin, "MEMORY_ORIGIN_CLIENT");
    assert.deepEqual(listed[1].metadata, { from: "form" });
    const updated = await engram.updateMemory(scope, oslo, { text: "Lives in Berlin", expectedVersion: 2 });
    assert.equal(updated.version, 3);
    await assert.rejects(engram.updateMemory(scope, oslo, { text: "Lives in Rome", expectedVersion: 2 }),
      (e: any) => e.code === status.ABORTED);
    const prompt = JSON.stringify((await engram.prepareRequest("node-facts", { userInput: "Where?", model: "gpt-4o" })).payload);
    assert.ok(prompt.includes("Lives in Berlin") && prompt.includes("Allergic to peanuts"), prompt);
    assert.ok(!prompt.includes("Oslo"), prompt);
    assert.equal(await engram.deleteMemory(scope, oslo), 4);
    const history = await engram.memoryHistory(scope, oslo);
    assert.ok(history.every((h) => h.fact === ""));
    await assert.rejects(engram.getMemory(scope, oslo), (e: any) => e.code === status.NOT_FOUND);
    const after = JSON.stringify((await engram.prepareRequest("node-facts", { model: "gpt-4o" })).payload);
    assert.ok(!after.includes("Berlin"), after);
    // A user's facts: pinned ones in every conversation of the user.
    const rui = { userId: "node-rui" };
    const [pin] = await engram.addMemories(rui, [{ text: "Speaks Portuguese", pinned: true }]);
    const first = await engram.prepareRequest("node-rui-1", { userId: "node-rui", userInput: "hi", model: "gpt-4o" });
    const system = JSON.stringify(first.payload);
    assert.ok(system.includes("## pinned facts (user)") && system.includes(") Speaks Portuguese"), system);
    await engram.deleteMemory(rui, pin.id);
    assert.deepEqual(await engram.listMemories(rui), []);
    // A turn forgotten: its words are found nowhere, the rest stays.
    await engram.ingest("node-forget", [user("My pin is 4417-zz"), assistant("Noted 4417-zz")]);
    await engram.ingest("node-forget", [user("I like tea"), assistant("Tea it is")]);
    assert.equal((await engram.forgetTurn("node-forget", "turn_0001")).traces_erased, 2);
    const found = await engram.searchHistory("node-forget", "4417-zz");
    assert.ok(!JSON.stringify(found).includes("4417-zz"));
    const kept = JSON.stringify((await engram.prepareRequest("node-forget", { model: "gpt-4o" })).payload);
    assert.ok(!kept.includes("4417-zz") && kept.includes("I like tea"), kept);
    assert.equal((await engram.forgetEvents("node-forget", ["nothing"])).traces_erased, 0);
  } finally {
    engram.close();
    await server.stop();
  }
});

test("a user's facts are consolidated and the runs logged", async () => {
  const server = await startEngramd();
  const engram = new EngramClient(server.addr);
  try {
    // Client-written facts never change: the run keeps them, and is logged.
    await engram.addMemories({ userId: "node-cu" }, ["Plays curling", { text: "Lives in Oslo", pinned: true }]);
    const run = await engram.consolidateUser("node-cu");
    assert.deepEqual([run.seq, run.trigger, run.merged, run.replaced, run.invalidated, run.unchanged],
      [1, "request", 0, 0, 0, 2]);
    assert.equal(run.groups_asked, 0, "the embedded summarizer is asked nothing");
    assert.ok(run.at > 0);
    const again = await engram.consolidateUser("node-cu");
    assert.equal(again.seq, 2);
    assert.deepEqual((await engram.listConsolidations("node-cu")).map((r) => r.seq), [2, 1]);
    assert.deepEqual((await engram.listConsolidations("node-cu", 1)).map((r) => r.seq), [2]);
    assert.deepEqual((await engram.listMemories({ userId: "node-cu" })).map((m) => m.fact), ["Lives in Oslo", "Plays curling"]);
    // A user with no facts: nothing to do, nothing logged.
    assert.equal((await engram.consolidateUser("node-nobody")).seq, 0);
    assert.deepEqual(await engram.listConsolidations("node-nobody"), []);
    await assert.rejects(engram.consolidateUser(""), (e: any) => e.code === status.INVALID_ARGUMENT);
  } finally {
    engram.close();
    await server.stop();
  }
});
