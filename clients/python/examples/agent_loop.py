"""A complete tool-using agent that keeps no conversation state: Engram holds
the transcript and hands back the exact request body for every LLM call.

    python examples/agent_loop.py --engram 127.0.0.1:50051 \
        --llm http://127.0.0.1:11434/v1 --model llama3.1 "Weather in Paris?"

Any OpenAI-compatible chat-completions endpoint works (OpenAI, vLLM,
Ollama, llama.cpp, LiteLLM); the key comes from OPENAI_API_KEY if set.
"""

import argparse
import json
import os
import sys
import urllib.request

from engram_client import EngramClient, assistant, tool_call, tool_result

SYSTEM = "You are a concise assistant. Use the tools for weather and arithmetic."
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                        "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]
MAX_STEPS = 8


def run_tool(name, args):
    """The agent's own tools (stand-ins for real ones)."""
    if name == "get_weather":
        return {"city": args.get("city", "?"), "temp_c": 12, "sky": "cloudy"}
    if name == "add":
        return {"sum": args["a"] + args["b"]}
    raise ValueError(f"no tool named {name}")


def chat(llm_url, body, api_key=None):
    """One chat-completions call; returns the decoded answer."""
    req = urllib.request.Request(
        llm_url.rstrip("/") + "/chat/completions", data=json.dumps(body).encode(),
        headers={"content-type": "application/json",
                 **({"authorization": f"Bearer {api_key}"} if api_key else {})})
    with urllib.request.urlopen(req, timeout=120) as res:
        return json.load(res)


def run_agent(engram, agent_id, question, *, llm_url, model, api_key=None):
    """Answers `question`, calling tools as the model asks; returns the text."""
    prompt = engram.prepare_request(agent_id, user_input=question, system_prompt=SYSTEM,
                                    model=model, render_format="openai-chat")
    for _ in range(MAX_STEPS):
        body = dict(prompt.payload, tools=TOOLS)
        answer = chat(llm_url, body, api_key)
        message = answer["choices"][0]["message"]
        usage = answer.get("usage")
        calls = message.get("tool_calls") or []
        if not calls:
            text = message.get("content") or ""
            engram.ingest(agent_id, [assistant(text)], usage=usage, model=model)
            return text
        engram.ingest(agent_id, [
            tool_call(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
            for c in calls], usage=usage, model=model)
        results = []
        for c in calls:
            name = c["function"]["name"]
            try:
                out = run_tool(name, json.loads(c["function"]["arguments"] or "{}"))
                results.append(tool_result(c["id"], out, name=name))
            except Exception as e:  # the model sees the failure and can recover
                results.append(tool_result(c["id"], name=name, error=str(e)))
        engram.ingest(agent_id, results)
        prompt = engram.prepare_request(agent_id, model=model, render_format="openai-chat")
    raise RuntimeError(f"no answer after {MAX_STEPS} model calls")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("question", nargs="+")
    p.add_argument("--engram", default="127.0.0.1:50051")
    p.add_argument("--token", default=os.environ.get("ENGRAM_TOKEN"))
    p.add_argument("--agent", default="example-agent")
    p.add_argument("--llm", default="http://127.0.0.1:11434/v1")
    p.add_argument("--model", default="llama3.1")
    a = p.parse_args()
    with EngramClient(a.engram, token=a.token) as engram:
        print(run_agent(engram, a.agent, " ".join(a.question), llm_url=a.llm, model=a.model,
                        api_key=os.environ.get("OPENAI_API_KEY")))


if __name__ == "__main__":
    sys.exit(main())
