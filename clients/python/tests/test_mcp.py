"""MCP at /mcp with the official Python client (`mcp`), in its legacy
mode (the initialize handshake) and its current one (the stateless
protocol): every tool is listed with its annotations and called, a bad
argument comes back as a result the model can read, an unknown tool as a
protocol error, and a token is needed when the server has tokens."""

import asyncio
import json
import urllib.error
import urllib.request

import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TOKEN = "desk-secret-0123456789"

READ_ONLY = {"search_memory", "list_memories", "read_memory_block", "search_history",
             "get_context_stats"}
TOOLS = READ_ONLY | {"add_memories", "update_memory", "delete_memory", "append_memory_block",
                     "replace_in_memory_block"}


def text(result):
    """The text of a tool's result, which must not be an error."""
    assert not result.is_error, [c.text for c in result.content]
    return result.content[0].text


async def session(base, mode, check, token=TOKEN):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http:
        async with Client(streamable_http_client(f"{base}/mcp", http_client=http),
                          mode=mode) as client:
            await check(client)


def tokens_file(tmp_path):
    path = tmp_path / "tokens.toml"
    path.write_text(
        f'[[tokens]]\nname = "desk"\ntoken = "{TOKEN}"\nagents = ["desk-*"]\n'
        'users = ["ana"]\ndefault_agent = "desk-1"\n')
    return str(path)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_every_tool_through_the_official_client(start_engramd_http, tmp_path, mode):
    _, base = start_engramd_http(ENGRAM__AUTH__TOKENS_FILE=tokens_file(tmp_path))

    async def check(client):
        listed = (await client.list_tools()).tools
        assert {t.name for t in listed} == TOOLS
        for tool in listed:
            assert tool.annotations.read_only_hint == (tool.name in READ_ONLY), tool.name
            assert tool.input_schema["type"] == "object"
        destructive = {t.name for t in listed if t.annotations.destructive_hint}
        assert destructive == {"update_memory", "delete_memory", "replace_in_memory_block"}

        # The token's default agent, made by its first block.
        made = json.loads(text(await client.call_tool(
            "append_memory_block", {"label": "notes", "text": "Trip to Porto in May"})))
        assert made["block"]["value"] == "Trip to Porto in May"
        replaced = json.loads(text(await client.call_tool(
            "replace_in_memory_block",
            {"label": "notes", "old_text": "May", "new_text": "June"})))
        assert replaced["block"]["value"] == "Trip to Porto in June"
        assert "June" in text(await client.call_tool("read_memory_block", {"label": "notes"}))

        added = json.loads(text(await client.call_tool(
            "add_memories", {"memories": [{"text": "Prefers window seats", "tags": ["travel"]}]})))
        memory_id = added["results"][0]["id"]
        text(await client.call_tool(
            "update_memory", {"memory_id": memory_id, "text": "Prefers aisle seats"}))
        listed_facts = json.loads(text(await client.call_tool("list_memories", {})))
        assert [m["fact"] for m in listed_facts["memories"]] == ["Prefers aisle seats"]
        found = text(await client.call_tool("search_memory", {"query": "aisle seats"}))
        assert "Prefers aisle seats" in found
        stats = json.loads(text(await client.call_tool("get_context_stats", {})))
        assert "budget" in stats
        history = json.loads(text(await client.call_tool("search_history", {"query": "Porto"})))
        assert "index" in history
        text(await client.call_tool("delete_memory", {"memory_id": memory_id}))
        assert "aisle" not in text(await client.call_tool("list_memories", {}))

        # A user the token covers, named.
        text(await client.call_tool(
            "add_memories", {"user_id": "ana", "memories": [{"text": "Allergic to nuts"}]}))
        assert "nuts" in text(await client.call_tool("list_memories", {"user_id": "ana"}))

        # Refusals the model can read: outside the token, a bad argument.
        outside = await client.call_tool("list_memories", {"agent_id": "ops-1"})
        assert outside.is_error and outside.content[0].text.startswith("PERMISSION_DENIED")
        bad = await client.call_tool("update_memory", {"text": "no id"})
        assert bad.is_error and "memory_id" in bad.content[0].text
        with pytest.raises(MCPError):
            await client.call_tool("teleport", {})

    asyncio.run(session(base, mode, check))


def test_a_token_is_needed(start_engramd_http, tmp_path):
    _, base = start_engramd_http(ENGRAM__AUTH__TOKENS_FILE=tokens_file(tmp_path))

    async def check(client):
        await client.list_tools()

    # The client fails to start a session with a token the server lacks ...
    with pytest.raises(BaseException):
        asyncio.run(session(base, "legacy", check, token="not-a-token-of-this-server"))
    # ... because the server answers 401 before MCP reads the request.
    request = urllib.request.Request(
        f"{base}/mcp", method="POST",
        data=json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(),
        headers={"content-type": "application/json",
                 "accept": "application/json, text/event-stream"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401
    assert refused.value.headers["www-authenticate"] == "Bearer"
