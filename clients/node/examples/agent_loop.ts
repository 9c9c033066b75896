/**
 * A complete tool-using agent that keeps no conversation state: Engram holds
 * the transcript and hands back the exact request body for every LLM call.
 *
 *   node dist/examples/agent_loop.js --llm http://127.0.0.1:11434/v1 --model llama3.1 "Weather in Paris?"
 *
 * Any OpenAI-compatible chat-completions endpoint works; the key comes from
 * OPENAI_API_KEY if set.
 */
import { EngramClient, Json, assistant, toolCall, toolResult } from "../src";

export const SYSTEM = "You are a concise assistant. Use the tools for weather and arithmetic.";
export const TOOLS = [
  { type: "function", function: { name: "get_weather", description: "Current weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } },
  { type: "function", function: { name: "add", description: "Add two numbers",
    parameters: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] } } },
];
const MAX_STEPS = 8;

/** The agent's own tools (stand-ins for real ones). */
export function runTool(name: string, args: any): Json {
  if (name === "get_weather") return { city: args.city ?? "?", temp_c: 12, sky: "cloudy" };
  if (name === "add") return { sum: args.a + args.b };
  throw new Error(`no tool named ${name}`);
}

async function chat(llmUrl: string, body: object, apiKey?: string): Promise<any> {
  const res = await fetch(llmUrl.replace(/\/$/, "") + "/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`LLM answered ${res.status}: ${await res.text()}`);
  return res.json();
}

/** Answers `question`, calling tools as the model asks; returns the text. */
export async function runAgent(engram: EngramClient, agentId: string, question: string,
  opts: { llmUrl: string; model: string; apiKey?: string }): Promise<string> {
  let prompt = await engram.prepareRequest(agentId, { userInput: question, systemPrompt: SYSTEM, model: opts.model });
  for (let step = 0; step < MAX_STEPS; step++) {
    const answer = await chat(opts.llmUrl, { ...prompt.payload, tools: TOOLS }, opts.apiKey);
    const message = answer.choices[0].message;
    const usage = answer.usage;
    const calls: any[] = message.tool_calls ?? [];
    if (calls.length === 0) {
      const text = message.content ?? "";
      await engram.ingest(agentId, [assistant(text)], { usage, model: opts.model });
      return text;
    }
    const parsed = calls.map((c) => ({ id: c.id, name: c.function.name, args: JSON.parse(c.function.arguments || "{}") }));
    await engram.ingest(agentId, parsed.map((c) => toolCall(c.id, c.name, c.args)), { usage, model: opts.model });
    await engram.ingest(agentId, parsed.map((c) => {
      try {
        return toolResult(c.id, runTool(c.name, c.args), { name: c.name });
      } catch (e) {
        // The model sees the failure and can recover.
        return toolResult(c.id, null, { name: c.name, error: String(e) });
      }
    }));
    prompt = await engram.prepareRequest(agentId, { model: opts.model });
  }
  throw new Error(`no answer after ${MAX_STEPS} model calls`);
}

if (require.main === module) {
  const args = process.argv.slice(2);
  const flag = (name: string, fallback: string) => {
    const i = args.indexOf(`--${name}`);
    return i >= 0 ? args.splice(i, 2)[1] : fallback;
  };
  const target = flag("engram", "127.0.0.1:50051");
  const agent = flag("agent", "example-agent");
  const llmUrl = flag("llm", "http://127.0.0.1:11434/v1");
  const model = flag("model", "llama3.1");
  const engram = new EngramClient(target, { token: process.env.ENGRAM_TOKEN });
  runAgent(engram, agent, args.join(" "), { llmUrl, model, apiKey: process.env.OPENAI_API_KEY })
    .then((text) => console.log(text))
    .catch((e) => { console.error(e); process.exitCode = 1; })
    .finally(() => engram.close());
}
