# Appended to the MCP guide's snippet (docs/guide/mcp.md): the fact is in the memory the
# server's default (mcp.agent_id) names, and search found it.


async def check():
    async with Client(streamable_http_client("http://127.0.0.1:8080/mcp")) as engram:
        listed = await engram.call_tool("list_memories", {"agent_id": "desk-1"})
        assert "Prefers window seats" in listed.content[0].text, listed
        found = await engram.call_tool("search_memory", {"query": "seats"})
        assert "Prefers window seats" in found.content[0].text, found


asyncio.run(check())
