"""EngramMemoryTool against the real engramd, next to the Anthropic SDK's own
reference implementation (BetaLocalFilesystemMemoryTool) run on the same
commands."""

import json
import threading

import anthropic
import pytest
from anthropic.lib.tools import BetaAbstractMemoryTool, ToolError
from anthropic.tools.memory import BetaLocalFilesystemMemoryTool
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from conftest import json_server
from engram_client import EngramClient
from engram_client.memory_tool import EngramMemoryTool


@pytest.fixture
def engram(engramd):
    with EngramClient(engramd) as client:
        yield client


@pytest.fixture
def tool(engram):
    return EngramMemoryTool(engram, user_id="ana")


def outcome(tool, command: dict) -> str:
    """What the model would read: the result, or the error's text."""
    try:
        return tool.call(command)
    except ToolError as err:
        return "ERROR " + str(err)


# Every command, through the SDK's own parsing (tool.call), with the
# reference's answers and errors.
SCRIPT = [
    {"command": "view", "path": "/memories"},
    {"command": "create", "path": "/memories/notes.md", "file_text": "Line 1\nOld Text\nLine 3"},
    {"command": "create", "path": "/memories/notes.md", "file_text": "again"},
    {"command": "create", "path": "/memories/todo.txt", "file_text": "a\n"},
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/memories/notes.md"},
    {"command": "view", "path": "/memories/notes.md", "view_range": [2, 3]},
    {"command": "view", "path": "/memories/notes.md", "view_range": [2, -1]},
    {"command": "view", "path": "/memories/todo.txt"},
    {"command": "view", "path": "/memories/missing.md"},
    {"command": "str_replace", "path": "/memories/notes.md", "old_str": "Old Text", "new_str": "New Text"},
    {"command": "str_replace", "path": "/memories/notes.md", "old_str": "absent", "new_str": "x"},
    {"command": "str_replace", "path": "/memories/notes.md", "old_str": "Line", "new_str": "x"},
    {"command": "str_replace", "path": "/memories/missing.md", "old_str": "a", "new_str": "b"},
    {"command": "str_replace", "path": "/memories", "old_str": "a", "new_str": "b"},
    {"command": "insert", "path": "/memories/notes.md", "insert_line": 0, "insert_text": "First\n"},
    {"command": "insert", "path": "/memories/notes.md", "insert_line": 4, "insert_text": "Last"},
    {"command": "insert", "path": "/memories/notes.md", "insert_line": 9, "insert_text": "x"},
    {"command": "insert", "path": "/memories/missing.md", "insert_line": 0, "insert_text": "x"},
    {"command": "view", "path": "/memories/notes.md"},
    {"command": "rename", "old_path": "/memories/notes.md", "new_path": "/memories/todo.txt"},
    {"command": "rename", "old_path": "/memories/missing.md", "new_path": "/memories/b.md"},
    {"command": "rename", "old_path": "/memories", "new_path": "/memories/b.md"},
    {"command": "rename", "old_path": "/memories/notes.md", "new_path": "/memories/kept.md"},
    {"command": "view", "path": "/memories/kept.md"},
    {"command": "view", "path": "/memories/notes.md"},
    {"command": "delete", "path": "/memories/todo.txt"},
    {"command": "delete", "path": "/memories/todo.txt"},
    {"command": "delete", "path": "/memories"},
    {"command": "view", "path": "/memories"},
    {"command": "view", "path": "/etc/passwd"},
    {"command": "create", "path": "/memories/../../../etc/passwd", "file_text": "x"},
]


def test_every_command_answers_as_the_sdk_reference_does(tool, tmp_path):
    reference = BetaLocalFilesystemMemoryTool(base_path=str(tmp_path))
    assert isinstance(tool, BetaAbstractMemoryTool)
    assert tool.to_dict() == reference.to_dict() == {"type": "memory_20250818", "name": "memory"}
    for command in SCRIPT:
        ours, theirs = outcome(tool, command), outcome(reference, command)
        if command["command"] == "view" and command["path"] == "/memories":
            # The directory's own size is the disk's in the reference, the
            # total of the files here; every other line is the same.
            ours_lines, theirs_lines = ours.split("\n"), theirs.split("\n")
            assert ours_lines[0] == theirs_lines[0]
            assert ours_lines[1].split("\t")[1] == theirs_lines[1].split("\t")[1] == "/memories"
            assert ours_lines[2:] == theirs_lines[2:], command
        elif theirs.startswith("ERROR"):
            # Same message; ours may say more.
            assert ours.startswith(theirs), (command, ours, theirs)
        else:
            assert ours == theirs, command
    assert outcome(tool, {"command": "view", "path": "/memories/kept.md"}) == (
        "Here's the content of /memories/kept.md with line numbers:\n"
        "     1\tFirst\n     2\tLine 1\n     3\tNew Text\n     4\tLine 3\n     5\tLast\n     6\t")


def test_files_are_blocks_of_the_scope_and_reach_the_prompt(engram, tool):
    tool.create(BetaMemoryTool20250818CreateCommand(
        command="create", path="/memories/prefs.md", file_text="Likes coffee, black."))
    engram.put_block("human", "Name: Ana.", user_id="ana")
    block = engram.get_block("prefs.md", user_id="ana").block
    assert (block.value, block.version) == ("Likes coffee, black.", 1)
    listing = tool.view(BetaMemoryTool20250818ViewCommand(command="view", path="/memories"))
    assert listing.split("\n")[1:] == ["30B\t/memories", "10B\t/memories/human",
                                       "20B\t/memories/prefs.md"]
    # Another conversation of Ana's shows what the tool wrote.
    prompt = engram.prepare_request("ana-chat-2", user_id="ana", user_input="hi",
                                    model="gpt-4o-mini")
    assert "Likes coffee, black." in prompt.payload["messages"][0]["content"]
    # An agent's tool sees that agent's blocks only.
    agent_tool = EngramMemoryTool(engram, agent_id="ana-chat-2")
    agent_tool.create(BetaMemoryTool20250818CreateCommand(
        command="create", path="/memories/prefs.md", file_text="this chat only"))
    assert engram.get_block("prefs.md", user_id="ana").block.value == "Likes coffee, black."
    assert engram.get_block("prefs.md", agent_id="ana-chat-2").block.value == "this chat only"
    with pytest.raises(ValueError):
        EngramMemoryTool(engram)
    with pytest.raises(ValueError):
        EngramMemoryTool(engram, agent_id="a", user_id="b")


ESCAPES = [
    "/etc/passwd", "memories/notes.md", "/memoriesx/notes.md", "../memories/notes.md", "",
    "/memories/../notes.md", "/memories/../../etc/passwd", "/memories/a/../../notes.md",
    "/memories/%2e%2e/notes.md", "/memories/%2E%2E%2Fnotes.md", "/memories/..%2fnotes.md",
    "/memories/%252e%252e/notes.md", "/memories/..\\notes.md", "/memories/%2e%2e%5cnotes.md",
]


@pytest.mark.parametrize("path", ESCAPES)
def test_paths_outside_memories_are_refused_by_every_command(engram, tool, path):
    engram.put_block("notes.md", "secret", user_id="ana")
    commands = [
        {"command": "view", "path": path},
        {"command": "create", "path": path, "file_text": "x"},
        {"command": "str_replace", "path": path, "old_str": "secret", "new_str": "x"},
        {"command": "insert", "path": path, "insert_line": 0, "insert_text": "x"},
        {"command": "delete", "path": path},
        {"command": "rename", "old_path": path, "new_path": "/memories/b.md"},
        {"command": "rename", "old_path": "/memories/notes.md", "new_path": path},
    ]
    for command in commands:
        with pytest.raises(ToolError, match=r"Path must start with /memories|would escape /memories directory"):
            tool.call(command)
    assert [(b.label, b.value, b.version) for b in engram.list_blocks(user_id="ana")] == [
        ("notes.md", "secret", 1)]


def test_nested_and_invalid_names_are_refused_plainly(engram, tool):
    with pytest.raises(ToolError, match=r"subdirectory.*flat.*/memories/projects_engram\.md"):
        tool.create(BetaMemoryTool20250818CreateCommand(
            command="create", path="/memories/projects/engram.md", file_text="x"))
    for name in ["Notes.md", "my notes.md", "n" * 65, "caf\u00e9.md", "a\x00b"]:
        with pytest.raises(ToolError, match="not a valid memory file name"):
            tool.create(BetaMemoryTool20250818CreateCommand(
                command="create", path=f"/memories/{name}", file_text="x"))
    assert engram.list_blocks(user_id="ana") == []
    # "." segments and doubled slashes name the same flat file.
    tool.create(BetaMemoryTool20250818CreateCommand(
        command="create", path="/memories/./a.md", file_text="x"))
    with pytest.raises(ToolError, match="File /memories//a.md already exists"):
        tool.create(BetaMemoryTool20250818CreateCommand(
            command="create", path="/memories//a.md", file_text="y"))
    assert [b.label for b in engram.list_blocks(user_id="ana")] == ["a.md"]


def test_read_only_blocks_are_viewed_never_written(engram, tool):
    engram.put_block("rules", "Be brief.", read_only=True, user_id="ana")
    assert tool.view(BetaMemoryTool20250818ViewCommand(command="view", path="/memories/rules")) == (
        "Here's the content of /memories/rules with line numbers:\n     1\tBe brief.")
    refused = [
        BetaMemoryTool20250818StrReplaceCommand(command="str_replace", path="/memories/rules",
                                                old_str="brief", new_str="verbose"),
        BetaMemoryTool20250818InsertCommand(command="insert", path="/memories/rules",
                                            insert_line=0, insert_text="x"),
        BetaMemoryTool20250818DeleteCommand(command="delete", path="/memories/rules"),
        BetaMemoryTool20250818RenameCommand(command="rename", old_path="/memories/rules",
                                            new_path="/memories/mine"),
    ]
    for command in refused:
        with pytest.raises(ToolError, match="The file /memories/rules is read-only"):
            tool.execute(command)
    with pytest.raises(ToolError, match="already exists"):
        tool.create(BetaMemoryTool20250818CreateCommand(
            command="create", path="/memories/rules", file_text="x"))
    tool.create(BetaMemoryTool20250818CreateCommand(
        command="create", path="/memories/mine", file_text="x"))
    with pytest.raises(ToolError, match="The destination /memories/rules already exists"):
        tool.rename(BetaMemoryTool20250818RenameCommand(
            command="rename", old_path="/memories/mine", new_path="/memories/rules"))
    assert tool.clear_all_memory() == "All memory cleared"
    block = engram.get_block("rules", user_id="ana").block
    assert (block.value, block.version, block.read_only) == ("Be brief.", 1, True)
    assert [b.label for b in engram.list_blocks(user_id="ana")] == ["rules"]


def test_size_limit_is_the_blocks(engram):
    small = EngramMemoryTool(engram, user_id="ana")
    with pytest.raises(ToolError, match="limit is 5000"):
        small.create(BetaMemoryTool20250818CreateCommand(
            command="create", path="/memories/big.md", file_text="x" * 5001))
    EngramMemoryTool(engram, user_id="ana", limit_chars=20000).create(
        BetaMemoryTool20250818CreateCommand(
            command="create", path="/memories/big.md", file_text="x" * 5001))
    assert engram.get_block("big.md", user_id="ana").block.limit_chars == 20000


class Interleaved:
    """The client, with another writer's change landing once right after
    the tool's first read: between its read and its write."""

    def __init__(self, client, meanwhile):
        self._client, self._meanwhile, self.reads = client, meanwhile, 0

    def get_block(self, *args, **kwargs):
        try:
            return self._client.get_block(*args, **kwargs)
        finally:  # NOT_FOUND included: a read that found nothing
            self.reads += 1
            if self._meanwhile:
                change, self._meanwhile = self._meanwhile, None
                change()

    def __getattr__(self, name):
        return getattr(self._client, name)


@pytest.mark.parametrize("command", [
    BetaMemoryTool20250818StrReplaceCommand(command="str_replace", path="/memories/log.md",
                                            old_str="two", new_str="TWO"),
    BetaMemoryTool20250818InsertCommand(command="insert", path="/memories/log.md",
                                        insert_line=1, insert_text="one and a half"),
    BetaMemoryTool20250818RenameCommand(command="rename", old_path="/memories/log.md",
                                        new_path="/memories/journal.md"),
], ids=["str_replace", "insert", "rename"])
def test_a_concurrent_edit_is_never_lost(engram, command):
    engram.put_block("log.md", "one\ntwo\n", user_id="ana")
    other = EngramMemoryTool(engram, user_id="ana")
    client = Interleaved(engram, lambda: other.insert(BetaMemoryTool20250818InsertCommand(
        command="insert", path="/memories/log.md", insert_line=2, insert_text="three")))
    EngramMemoryTool(client, user_id="ana").execute(command)
    # The first write was refused as stale, the command re-read and
    # applied itself to the other writer's text.
    assert client.reads == 2
    blocks = {b.label: b.value for b in engram.list_blocks(user_id="ana")}
    assert blocks == {
        "str_replace": {"log.md": "one\nTWO\nthree\n"},
        "insert": {"log.md": "one\none and a half\ntwo\nthree\n"},
        "rename": {"journal.md": "one\ntwo\nthree\n"},
    }[command.command]


def test_a_concurrent_change_stops_a_delete_of_a_block_made_read_only(engram):
    engram.put_block("log.md", "one\n", user_id="ana")
    client = Interleaved(engram, lambda: engram.put_block("log.md", "one\n", read_only=True,
                                                          user_id="ana"))
    with pytest.raises(ToolError, match="read-only"):
        EngramMemoryTool(client, user_id="ana").delete(
            BetaMemoryTool20250818DeleteCommand(command="delete", path="/memories/log.md"))
    assert engram.get_block("log.md", user_id="ana").block.value == "one\n"


def test_racing_writers_keep_every_edit_they_report(engram):
    engram.put_block("log.md", "", user_id="ana")
    start = threading.Barrier(4)
    done, busy = [], []

    def writer(n):
        tool = EngramMemoryTool(engram, user_id="ana")
        start.wait()
        for i in range(5):
            try:
                tool.insert(BetaMemoryTool20250818InsertCommand(
                    command="insert", path="/memories/log.md", insert_line=0,
                    insert_text=f"w{n}-{i}"))
                done.append(f"w{n}-{i}")
            except ToolError as err:
                assert "kept changing" in str(err)
                busy.append(f"w{n}-{i}")

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lines = engram.get_block("log.md", user_id="ana").block.value.splitlines()
    assert sorted(lines) == sorted(done) and len(done) + len(busy) == 20


@pytest.fixture
def fake_claude():
    """A /v1/messages that asks for the memory tool with each scripted
    input in turn, then answers in text. Yields (base_url, script, bodies)."""
    script, bodies = [], []

    def answer(path, body):
        bodies.append(body)
        n = len(bodies)
        if script:
            content = [{"type": "tool_use", "id": f"toolu_{n}", "name": "memory",
                        "input": script.pop(0)}]
            stop = "tool_use"
        else:
            content, stop = [{"type": "text", "text": "Noted."}], "end_turn"
        return {"id": f"msg_{n}", "type": "message", "role": "assistant",
                "model": body["model"], "content": content, "stop_reason": stop,
                "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}}

    with json_server(answer) as base:
        yield base, script, bodies


def test_the_sdk_tool_runner_drives_it(engram, tool, fake_claude):
    base_url, script, bodies = fake_claude
    script += [{"command": "create", "path": "/memories/coffee.md", "file_text": "Black."},
               {"command": "view", "path": "/memories/../secrets"}]
    claude = anthropic.Anthropic(base_url=base_url, api_key="test", max_retries=0)
    final = claude.beta.messages.tool_runner(
        model="claude-sonnet-5-5", max_tokens=256, tools=[tool],
        messages=[{"role": "user", "content": "Remember: I take my coffee black."}]).until_done()
    assert final.content[0].text == "Noted."
    assert bodies[0]["tools"] == [{"type": "memory_20250818", "name": "memory"}]
    results = [body["messages"][-1]["content"][0] for body in bodies[1:]]
    assert results[0]["content"] == "File created successfully at: /memories/coffee.md"
    assert not results[0].get("is_error")
    assert results[1]["is_error"] is True
    assert "would escape /memories directory" in json.dumps(results[1]["content"])
    assert engram.get_block("coffee.md", user_id="ana").block.value == "Black."
