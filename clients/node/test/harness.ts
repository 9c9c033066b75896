/** A real engramd per test (ENGRAMD names the binary; default
 * target/debug/engramd of this checkout) and a scripted OpenAI-compatible
 * endpoint standing in for the model. */
import { spawn, ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import * as readline from "node:readline";

const ROOT = path.resolve(__dirname, "..", "..", "..", "..");

export interface Engramd {
  addr: string;
  stop(): Promise<void>;
}

export async function startEngramd(env: Record<string, string> = {}): Promise<Engramd> {
  const binary = process.env.ENGRAMD ?? path.join(ROOT, "target", "debug", "engramd");
  const data = fs.mkdtempSync(path.join(os.tmpdir(), "engram-node-"));
  const child: ChildProcess = spawn(binary, [], {
    env: { ...process.env, ENGRAM__SERVER__LISTEN: "127.0.0.1:0", ENGRAM__STORE__DATA_DIR: data,
      ENGRAM__LOG__LEVEL: "warn", ...env },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = readline.createInterface({ input: child.stdout! });
  const first: string = await new Promise((resolve, reject) => {
    lines.once("line", resolve);
    child.once("exit", (code) => reject(new Error(`engramd exited with ${code}`)));
  });
  const prefix = "engramd listening on ";
  if (!first.startsWith(prefix)) throw new Error(`engramd did not start: ${first}`);
  return {
    addr: first.slice(prefix.length),
    stop: () => new Promise((resolve) => {
      child.once("exit", () => { fs.rmSync(data, { recursive: true, force: true }); resolve(); });
      child.kill("SIGTERM");
    }),
  };
}

export interface FakeLlm {
  baseUrl: string;
  seen: any[];
  close(): Promise<void>;
}

/** Asks for get_weather on a fresh question, answers from the tool result. */
export async function fakeLlm(): Promise<FakeLlm> {
  const seen: any[] = [];
  const server = http.createServer((req, res) => {
    let raw = "";
    req.on("data", (chunk) => (raw += chunk));
    req.on("end", () => {
      const body = JSON.parse(raw);
      seen.push({ path: req.url, body });
      const last = body.messages[body.messages.length - 1];
      const message = last.role === "tool"
        ? { role: "assistant", content: `It is ${JSON.parse(last.content).temp_c} C in ${JSON.parse(last.content).city}.` }
        : { role: "assistant", content: null, tool_calls: [{ id: `call_${seen.length}`, type: "function",
            function: { name: "get_weather", arguments: JSON.stringify({ city: "Oslo" }) } }] };
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ id: "x", object: "chat.completion", model: body.model,
        choices: [{ index: 0, message, finish_reason: "stop" }],
        usage: { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 } }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as any).port;
  return { baseUrl: `http://127.0.0.1:${port}/v1`, seen,
    close: () => new Promise((resolve) => server.close(() => resolve())) };
}
