"""Engram's Python client: a thin typed wrapper over the generated gRPC stubs.

    from engram_client import EngramClient, user

    with EngramClient("127.0.0.1:50051") as engram:
        engram.ingest("my-agent", [user("hello")])
        prompt = engram.prepare_request("my-agent", model="gpt-4o-mini")
        print(prompt.payload)          # the OpenAI chat request body, a dict

Adapters for agent frameworks, each needing its framework installed:
`EngramSession` (the OpenAI Agents SDK's Session; `pip install
engram-client[agents]`) and `engram_client.memory_tool.EngramMemoryTool`
(the Anthropic SDK's memory tool; `engram-client[anthropic]`).
"""

# Imports the Agents SDK only when used, so it is safe without it.
from .agents_session import EngramSession

from .client import (
    EngramClient,
    Prompt,
    assistant,
    tool_call,
    tool_result,
    user,
)

__all__ = ["EngramClient", "EngramSession", "Prompt", "assistant", "tool_call", "tool_result",
           "user"]
