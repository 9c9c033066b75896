
# --- Appended to the README's agent-loop snippet by scripts/readme_walkthrough.py:
# turn() driven by a scripted model with one tool, then what Engram stored.
seen = []


def scripted_llm(body):
    """Asks for get_weather on the question, answers from the tool's result."""
    seen.append(body)
    last = body["messages"][-1]
    if last["role"] == "tool":
        message = {"role": "assistant",
                   "content": "It is " + json.loads(last["content"])["sky"] + " in Paris."}
    else:
        message = {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_w", "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]}
    n = 300 + len(seen)
    return {"choices": [{"message": message}],
            "usage": {"prompt_tokens": n, "completion_tokens": 9, "total_tokens": n + 9}}


def weather(name, args):
    assert (name, args) == ("get_weather", {"city": "Paris"}), (name, args)
    return json.dumps({"city": args["city"], "sky": "clear"})


assert turn("loop-demo", "What is the weather in Paris?", scripted_llm, weather) == "It is clear in Paris."
# The second prompt carried the call and its result, paired, in OpenAI's shape.
assert [m["role"] for m in seen[1]["messages"]] == ["user", "assistant", "tool"], seen[1]["messages"]
assert seen[1]["messages"][1]["tool_calls"][0]["id"] == "call_w"
tail = engram.Retrieve(svc.RetrieveRequest(agent_id="loop-demo", include_tool_interactions=True))
[call] = tail.tool_interactions
assert (call.tool_name, call.status) == ("get_weather", t.TOOL_STATUS_SUCCESS), call
stats = engram.GetContextStats(svc.GetContextStatsRequest(agent_id="loop-demo"))
assert (stats.turns, stats.last_reported_prompt_tokens) == (1, 302), stats
print("turn() ran a tool call through Engram")
