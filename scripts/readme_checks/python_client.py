
# --- Appended to the README's EngramClient snippet by scripts/readme_walkthrough.py:
# what the snippet sent and stored.
assert prompt.payload["messages"][-1] == {"role": "user", "content": "Weather in Paris?"}
assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"], body
with EngramClient("127.0.0.1:50051") as check:
    stats = check.context_stats("my-agent")
    assert (stats.turns, stats.last_reported_prompt_tokens) == (1, 812), stats
    tail = check.retrieve("my-agent", include_tool_interactions=True)
    assert tail.raw_tail[-1].content == "18 degrees in Paris.", tail
    assert tail.tool_interactions[0].status == 2, tail  # TOOL_STATUS_SUCCESS
print("the client snippet stored one turn with its tool call")
