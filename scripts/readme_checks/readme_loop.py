
# --- Appended to the README's agent loop by scripts/readme_walkthrough.py:
# what the loop stored, and what the model was shown.
assert message["content"].startswith("The tool says:"), message
with EngramClient("127.0.0.1:50051") as check:
    stats = check.context_stats("trip-1")
    assert stats.turns == 1 and stats.last_reported_prompt_tokens == 120, stats
    kinds = [t.trace_type for t in check.retrieve("trip-1").raw_tail]
    # user, tool call, tool result, the answer
    assert kinds == [1, 3, 4, 2], kinds
print("the README's loop stored one turn: the question, the tool call, its result, the answer")
