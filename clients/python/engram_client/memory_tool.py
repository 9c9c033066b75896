"""The Anthropic SDK's memory tool (`memory_20250818`) kept in Engram.

    from anthropic import Anthropic
    from engram_client import EngramClient
    from engram_client.memory_tool import EngramMemoryTool

    engram = EngramClient("127.0.0.1:50051")
    memory = EngramMemoryTool(engram, user_id="ana")
    runner = Anthropic().beta.messages.tool_runner(
        model="claude-sonnet-4-5", max_tokens=1024, tools=[memory],
        messages=[{"role": "user", "content": "Remember that I like coffee"}])

Each file `/memories/<name>` is the memory block `<name>` of one agent or
one user, so what Claude writes there is in every later prompt Engram
prepares for that scope. Answers and error messages are those of the SDK's
reference implementation (`BetaLocalFilesystemMemoryTool`), with Engram's
rules on top:

- Files are flat: a block label is 1-64 characters of `[a-z0-9_.-]`, which
  has no `/`, so `/memories/a/b.md` is refused (it cannot be stored under a
  name that reads back as the same path), as are names outside that set.
- Every write is checked against the version it read (`expected_version`),
  so two writers never lose each other's change: the loser re-reads and
  applies its edit to the new text.
- Blocks marked `read_only` can be viewed, never changed by the tool.
"""

from __future__ import annotations

import re
from typing import NoReturn, Optional
from urllib.parse import unquote

import grpc
from anthropic.lib.tools import BetaAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from engram.v1 import memory_pb2 as memory

from .client import EngramClient

ROOT = "/memories"
# The reference numbers lines in a field as wide as its largest line number.
LINE_NUMBER_WIDTH = len(str(999_999))
# crates/engram-core/src/blocks.rs check_label.
_LABEL = re.compile(r"[a-z0-9_.-]{1,64}")
# Tries of one command when other writers keep changing the block between
# its read and its write; each retry re-reads, so none of them loses data.
ATTEMPTS = 5
# Refusals the model can act on (fix the argument, shorten the text); any
# other failure (server down, bad token) is the application's and raises.
_MODEL_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
                 grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED}


def _code(err: grpc.RpcError) -> Optional[grpc.StatusCode]:
    return err.code() if hasattr(err, "code") else None


def _reraise(err: grpc.RpcError) -> NoReturn:
    """Raises a failed call's error: as a ToolError the model reads when it
    can act on it, else as it is."""
    if _code(err) in _MODEL_ERRORS:
        raise ToolError(err.details()) from err
    raise err


def _format_file_size(size: int) -> str:
    """A size as the reference's directory listing shows it: 0B, 12B, 1.5K, 2M."""
    if size == 0:
        return "0B"
    units = ["B", "K", "M", "G"]
    i = min((size.bit_length() - 1) // 10, len(units) - 1)
    scaled = size / (1024 ** i)
    return f"{int(scaled)}{units[i]}" if scaled == int(scaled) else f"{scaled:.1f}{units[i]}"


def _number(lines: list, first: int) -> str:
    return "\n".join(f"{str(i + first).rjust(LINE_NUMBER_WIDTH)}\t{line}"
                     for i, line in enumerate(lines))


class EngramMemoryTool(BetaAbstractMemoryTool):
    """The memory tool over the memory blocks of an agent (`agent_id`: one
    conversation) or a user (`user_id`: all of the user's conversations).
    `limit_chars` is the size limit of the files it creates (0: the
    server's default, 5000 characters)."""

    def __init__(self, client: EngramClient, *, agent_id: Optional[str] = None,
                 user_id: Optional[str] = None, limit_chars: int = 0,
                 cache_control: Optional[BetaCacheControlEphemeralParam] = None) -> None:
        super().__init__(cache_control=cache_control)
        if (agent_id is None) == (user_id is None):
            raise ValueError("give exactly one of agent_id or user_id")
        self.client = client
        self.limit_chars = limit_chars
        self._scope = {"agent_id": agent_id} if agent_id is not None else {"user_id": user_id}

    # Paths

    def _label(self, path: str) -> Optional[str]:
        """The block `path` names; None for /memories itself."""
        if path != ROOT and not path.startswith(ROOT + "/"):
            raise ToolError(f"Path must start with /memories, got: {path}")
        rest = path[len(ROOT):]
        # A ".." hidden by percent-encoding (%2e%2e, or %252e%252e encoded
        # twice) or behind a backslash is still a way up: decode until
        # nothing changes, then look at every segment.
        decoded = rest
        while (once := unquote(decoded)) != decoded:
            decoded = once
        if ".." in re.split(r"[/\\]", decoded):
            raise ToolError(f"Path {path} would escape /memories directory ('..' is not allowed)")
        parts = [p for p in rest.split("/") if p not in ("", ".")]
        if not parts:
            return None
        if len(parts) > 1:
            raise ToolError(
                f"The path {path} is in a subdirectory, and memory files are flat: use "
                f"/memories/<name> (for example /memories/{'_'.join(parts).lower()})")
        if not _LABEL.fullmatch(parts[0]):
            raise ToolError(
                f"The name in {path} is not a valid memory file name: use 1-64 characters "
                "of lowercase a-z, 0-9, '_', '.' and '-'")
        return parts[0]

    def _file(self, path: str, *, missing: str) -> memory.MemoryBlock:
        """The block of an existing file, or a ToolError saying `missing`."""
        label = self._label(path)
        if label is None:
            raise ToolError(f"The path {path} is not a file.")
        try:
            return self.client.get_block(label, **self._scope).block
        except grpc.RpcError as err:
            if _code(err) == grpc.StatusCode.NOT_FOUND:
                raise ToolError(missing) from err
            _reraise(err)

    def _writable(self, path: str, *, missing: str) -> memory.MemoryBlock:
        block = self._file(path, missing=missing)
        if block.read_only:
            raise ToolError(f"The file {path} is read-only: it can be viewed, not changed.")
        return block

    @staticmethod
    def _busy(path: str) -> ToolError:
        return ToolError(f"The file {path} kept changing while it was being edited; "
                         "view it and try again.")

    # Commands

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        path = command.path
        if self._label(path) is None:
            try:
                blocks = self.client.list_blocks(**self._scope)
            except grpc.RpcError as err:
                _reraise(err)
            # The reference hides dot files; a block labelled ".x" is
            # still there for view and the other commands.
            files = sorted((b.label, len(b.value.encode())) for b in blocks
                           if not b.label.startswith("."))
            # A directory's own size on disk says nothing here; the total
            # of its files does.
            lines = [f"{_format_file_size(sum(size for _, size in files))}\t{path}"]
            lines += [f"{_format_file_size(size)}\t{ROOT}/{label}" for label, size in files]
            return (f"Here're the files and directories up to 2 levels deep in {path}, "
                    "excluding hidden items:\n" + "\n".join(lines))
        block = self._file(path, missing=f"The path {path} does not exist. "
                                         "Please provide a valid path.")
        # Split on "\n" as the reference does: a final newline shows as an
        # empty last line. (Its 999,999-line cap cannot be reached: a block
        # holds at most 200,000 characters.)
        lines = block.value.split("\n")
        first = 1
        if command.view_range and len(command.view_range) == 2:
            start, end = command.view_range
            first = max(1, start)
            lines = lines[first - 1:len(lines) if end == -1 else end]
        return f"Here's the content of {path} with line numbers:\n" + _number(lines, first)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        path = command.path
        label = self._label(path)
        if label is None:
            raise ToolError("Cannot create the /memories directory itself")
        try:
            # expected_version 0: only if no such block exists, in one step.
            self.client.put_block(label, command.file_text, expected_version=0,
                                  limit_chars=self.limit_chars, **self._scope)
        except grpc.RpcError as err:
            if _code(err) == grpc.StatusCode.ABORTED:
                raise ToolError(f"File {path} already exists") from err
            _reraise(err)
        return f"File created successfully at: {path}"

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        path, old = command.path, command.old_str
        for _ in range(ATTEMPTS):
            block = self._writable(path, missing=f"The path {path} does not exist. "
                                                 "Please provide a valid path.")
            content = block.value
            count = content.count(old)
            if count == 0:
                raise ToolError(f"No replacement was performed, old_str `{old}` did not "
                                f"appear verbatim in {path}.")
            if count > 1:
                at = [m.start() for m in re.finditer(f"(?={re.escape(old)})", content)]
                lines = ", ".join(str(content[:pos].count("\n") + 1) for pos in at)
                raise ToolError(f"No replacement was performed. Multiple occurrences of "
                                f"old_str `{old}` in lines: {lines}. Please ensure it is unique")
            changed = content[:content.find(old)].count("\n")
            try:
                # The server replaces only if `old` occurs exactly once in
                # the version read, the version that passed the checks above.
                block = self.client.edit_block(block.label, replace=(old, command.new_str),
                                               expected_version=block.version, **self._scope)
            except grpc.RpcError as err:
                if _code(err) in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND):
                    continue
                _reraise(err)
            new_lines = block.value.split("\n")
            start, end = max(0, changed - 2), min(len(new_lines), changed + 3)
            return ("The memory file has been edited. Here is the snippet showing the change "
                    "(with line numbers):\n" + _number(new_lines[start:end], start + 1))
        raise self._busy(path)

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        path = command.path
        for _ in range(ATTEMPTS):
            block = self._writable(path, missing=f"The path {path} does not exist. "
                                                 "Please provide a valid path.")
            # As the reference: lines split on "\n" only, the text's own
            # final newline dropped, the file ending in a newline after.
            lines = block.value.split("\n")
            if lines[-1] == "":
                lines.pop()
            if not 0 <= command.insert_line <= len(lines):
                raise ToolError(f"Invalid `insert_line` parameter: {command.insert_line}. "
                                f"It should be within the range [0, {len(lines)}].")
            lines.insert(command.insert_line, command.insert_text.rstrip("\n"))
            value = "\n".join(lines)
            if not value.endswith("\n"):
                value += "\n"
            try:
                self.client.put_block(block.label, value, expected_version=block.version,
                                      **self._scope)
            except grpc.RpcError as err:
                if _code(err) in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND):
                    continue
                _reraise(err)
            return f"The file {path} has been edited."
        raise self._busy(path)

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        path = command.path
        if self._label(path) is None:
            raise ToolError("Cannot delete the /memories directory itself")
        for _ in range(ATTEMPTS):
            block = self._writable(path, missing=f"The path {path} does not exist")
            try:
                # At the version read, so a block made read-only meanwhile
                # is not deleted.
                self.client.delete_block(block.label, expected_version=block.version,
                                         **self._scope)
            except grpc.RpcError as err:
                if _code(err) in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND):
                    continue
                _reraise(err)
            return f"Successfully deleted {path}"
        raise self._busy(path)

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        old_path, new_path = command.old_path, command.new_path
        if self._label(old_path) is None:
            raise ToolError("Cannot rename the /memories directory itself")
        new_label = self._label(new_path)
        if new_label is None:
            raise ToolError(f"The destination {new_path} already exists")
        for _ in range(ATTEMPTS):
            block = self._writable(old_path, missing=f"The path {old_path} does not exist")
            # Blocks have no rename: write the copy (only if the name is
            # free), then delete the original at the version copied. A crash
            # in between leaves both, never neither.
            try:
                copy = self.client.put_block(
                    new_label, block.value, expected_version=0,
                    format="json" if block.format == memory.BLOCK_FORMAT_JSON else "text",
                    description=block.description, limit_chars=block.limit_chars,
                    **self._scope)
            except grpc.RpcError as err:
                if _code(err) == grpc.StatusCode.ABORTED:
                    raise ToolError(f"The destination {new_path} already exists") from err
                _reraise(err)
            try:
                self.client.delete_block(block.label, expected_version=block.version,
                                         **self._scope)
            except grpc.RpcError as err:
                if _code(err) not in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND):
                    _reraise(err)
                # The original changed (or went) after it was copied: take
                # the stale copy back and start over from the new original.
                try:
                    self.client.delete_block(new_label, expected_version=copy.version,
                                             **self._scope)
                except grpc.RpcError as undo:
                    if _code(undo) not in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND):
                        raise
                    # Someone already wrote to the copy: it is theirs now.
                    raise ToolError(f"The destination {new_path} already exists") from undo
                continue
            return f"Successfully renamed {old_path} to {new_path}"
        raise self._busy(old_path)

    def clear_all_memory(self) -> str:
        """Deletes every block of the scope the tool may write (read-only
        ones stay, and so does a block changed while this runs)."""
        for block in self.client.list_blocks(**self._scope):
            if block.read_only:
                continue
            try:
                self.client.delete_block(block.label, expected_version=block.version,
                                         **self._scope)
            except grpc.RpcError as err:
                if _code(err) not in (grpc.StatusCode.ABORTED, grpc.StatusCode.NOT_FOUND):
                    raise
        return "All memory cleared"
