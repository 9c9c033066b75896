"""Engram's Python client: a thin typed wrapper over the generated gRPC stubs.

    from engram_client import EngramClient, user

    with EngramClient("127.0.0.1:50051") as engram:
        engram.ingest("my-agent", [user("hello")])
        prompt = engram.prepare_request("my-agent", model="gpt-4o-mini")
        print(prompt.payload)          # the OpenAI chat request body, a dict
"""

from .client import (
    EngramClient,
    Prompt,
    assistant,
    tool_call,
    tool_result,
    user,
)

__all__ = ["EngramClient", "Prompt", "assistant", "tool_call", "tool_result", "user"]
