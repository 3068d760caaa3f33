"""`/read_file`, `/write_file` and `/edit_file`: one file of the user's workspace at a time.

Every handler resolves its path with `paths.resolve_path` and does its I/O through
`fs.py`, so the sandbox rules live in those two modules only.

Decisions: `/write_file` writes the body exactly as given (the command detector drops
trailing blank lines, so a file written from chat has no final newline unless the body
ends with an empty line inside a fence); empty content is refused, because a command
without a body is almost always a model that forgot it, and silently truncating a file
would destroy data. `/edit_file` re-reads the file and writes it atomically; a concurrent
writer between the two can be overwritten (last writer wins), as with any editor.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints, model_validator

from foundation.text_lines import text_lines
from tools.base import (
    ASKS,
    READ_ONLY_LOCAL,
    CommandBinding,
    ErrorCode,
    Tool,
    ToolContext,
    ToolFailure,
    ToolHints,
    ToolInput,
    ToolOutput,
)
from tools.workspace.edit_blocks import apply_blocks, parse_blocks
from tools.workspace.fs import check_quota, decode_text, read_bytes, walk_workspace, write_atomic
from tools.workspace.paths import SafePath, resolve_path, workspace_root

MAX_READ_LINES = 400
MAX_READ_CHARS = 40_000
MAX_LINE_CHARS = 2_000
_LINE_RANGE = re.compile(r"^(?P<path>.*\S)\s+(?P<start>\d+)-(?P<end>\d*)$", re.DOTALL)

PathText = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]  # the schema says what is refused
PATH_HELP = "Path relative to your workspace, e.g. notes/todo.txt (no '..', no leading '/')."


def _locate(ctx: ToolContext, raw: str) -> SafePath:
    return resolve_path(workspace_root(ctx.settings, ctx.user_id), raw)


class ReadFileInput(ToolInput):
    path: PathText = Field(description=PATH_HELP)
    start_line: int | None = Field(default=None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(default=None, ge=1, description="Last line to show (inclusive).")

    @model_validator(mode="before")
    @classmethod
    def split_line_range(cls, data: Any) -> Any:
        """`/read_file big.log 401-800`: a trailing `N-M` (or `N-`) token is a line range."""
        if isinstance(data, dict) and isinstance(data.get("path"), str) and "start_line" not in data:
            match = _LINE_RANGE.match(data["path"].strip())
            if match:
                data = {**data, "path": match["path"], "start_line": int(match["start"])}
                if match["end"]:
                    data["end_line"] = int(match["end"])
        return data


class ReadFileOutput(ToolOutput):
    path: str
    size: int
    binary: bool
    total_lines: int
    start_line: int
    end_line: int
    truncated: bool
    content: str

    def render(self) -> str:
        if self.binary:
            return f"{self.path}: binary file, {self.size} bytes (not shown)."
        if self.total_lines == 0:
            return f"{self.path}: empty file (0 bytes)."
        header = f"{self.path} ({self.total_lines} lines, {self.size} bytes), lines {self.start_line}-{self.end_line}:"
        numbered = [
            f"{number:>5}  {line}" for number, line in enumerate(self.content.split("\n"), start=self.start_line)
        ]
        lines = [header, *numbered]
        if self.truncated:
            lines.append(
                f"[truncated: showing lines {self.start_line}-{self.end_line} of {self.total_lines}; "
                f"read on with /read_file {self.path} {self.end_line + 1}-{self.end_line + MAX_READ_LINES}]"
            )
        return "\n".join(lines)


def read_file(data: ReadFileInput, ctx: ToolContext) -> ReadFileOutput:
    """A window of at most MAX_READ_LINES lines / MAX_READ_CHARS characters; binary never shown."""
    target = _locate(ctx, data.path)
    raw = read_bytes(target)
    text = decode_text(raw)
    if text is None:
        return ReadFileOutput(
            path=target.relative,
            size=len(raw),
            binary=True,
            total_lines=0,
            start_line=0,
            end_line=0,
            truncated=False,
            content="",
        )
    lines = text_lines(text)
    start = data.start_line or 1
    if lines and start > len(lines):
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED,
            f"start_line {start} is past the end of {target.relative} ({len(lines)} lines).",
        )
    last = min(len(lines), data.end_line or len(lines), start + MAX_READ_LINES - 1)
    if last < start and lines:
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED, f"end_line {data.end_line} is before start_line {start}; give start-end."
        )
    shown: list[str] = []
    chars = 0
    for line in lines[start - 1 : last]:
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + " [line cut]"
        if chars + len(line) > MAX_READ_CHARS and shown:
            break
        shown.append(line)
        chars += len(line) + 1
    end = start + len(shown) - 1
    wanted_end = min(len(lines), data.end_line or len(lines))
    return ReadFileOutput(
        path=target.relative,
        size=len(raw),
        binary=False,
        total_lines=len(lines),
        start_line=start if lines else 0,
        end_line=end if lines else 0,
        truncated=end < wanted_end,
        content="\n".join(shown),
    )


class WriteFileInput(ToolInput):
    model_config = ConfigDict(str_strip_whitespace=False)  # content is written byte for byte

    path: PathText = Field(description=PATH_HELP)
    content: str = Field(min_length=1, description="The whole new file content (the command body).")


class WriteFileOutput(ToolOutput):
    path: str
    bytes: int
    lines: int
    created: bool

    def render(self) -> str:
        verb = "Created" if self.created else "Replaced"
        return f"{verb} {self.path} ({self.bytes} bytes, {self.lines} lines)."


def _save(ctx: ToolContext, target: SafePath, text: str) -> tuple[bytes, bool]:
    if "\x00" in text:
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED, "the content contains a NUL character; only text files can be written."
        )
    data = text.encode("utf-8", "surrogatepass")
    if decode_text(data) is None:
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED, "the content is not valid Unicode text; only text files can be written."
        )
    check_quota(walk_workspace(target.root, ctx.remaining), target.relative, len(data))
    return data, write_atomic(target, data)


def write_file(data: WriteFileInput, ctx: ToolContext) -> WriteFileOutput:
    target = _locate(ctx, data.path)
    encoded, created = _save(ctx, target, data.content)
    return WriteFileOutput(
        path=target.relative, bytes=len(encoded), lines=len(text_lines(data.content)), created=created
    )


class EditFileInput(ToolInput):
    model_config = ConfigDict(str_strip_whitespace=False)  # whitespace in SEARCH text must match exactly

    path: PathText = Field(description=PATH_HELP)
    edits: str = Field(min_length=1, description="One or more <<<<<<< SEARCH / ======= / >>>>>>> REPLACE blocks.")


class EditFileOutput(ToolOutput):
    path: str
    blocks: int
    bytes_before: int
    bytes_after: int

    def render(self) -> str:
        plural = "block" if self.blocks == 1 else "blocks"
        return f"Edited {self.path}: applied {self.blocks} {plural}; {self.bytes_before} -> {self.bytes_after} bytes."


def edit_file(data: EditFileInput, ctx: ToolContext) -> EditFileOutput:
    """All blocks apply or nothing is written: the new text is built in memory first."""
    target = _locate(ctx, data.path)
    blocks = parse_blocks(data.edits)
    raw = read_bytes(target)
    text = decode_text(raw)
    if text is None:
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED,
            f"{target.relative} is a binary file ({len(raw)} bytes); only text files can be edited.",
        )
    encoded, _ = _save(ctx, target, apply_blocks(text, blocks, target.relative))
    return EditFileOutput(path=target.relative, blocks=len(blocks), bytes_before=len(raw), bytes_after=len(encoded))


READ_FILE_TOOL = Tool(
    name="read_file",
    annotations=READ_ONLY_LOCAL,  # served over /mcp
    description="Read a text file of your workspace, with line numbers (a window of up to 400 lines).",
    input_model=ReadFileInput,
    output_model=ReadFileOutput,
    handler=read_file,
    result_role="file_tools",
    command=CommandBinding(
        name="read_file",
        usage="/read_file <path> [start-end]",
        example="/read_file notes/todo.txt",
        args_field="path",
        request="Show me my notes/todo.txt file.",
    ),
    timeout_s=10.0,
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)

WRITE_FILE_TOOL = Tool(
    name="write_file",
    annotations=ToolHints(
        destructive=True, idempotent=True, open_world=False
    ),  # served over /mcp: replaces a file: the same call twice leaves the same file
    description="Create or replace a text file of your workspace with the command body as its content.",
    input_model=WriteFileInput,
    output_model=WriteFileOutput,
    handler=write_file,
    result_role="file_tools",
    approval=ASKS,  # it replaces a file: the user sees the content first (SPEC 8)
    command=CommandBinding(
        name="write_file",
        usage="/write_file <path> (the file content on the following lines)",
        example="/write_file notes/todo.txt",
        args_field="path",
        body_field="content",
    ),
    timeout_s=10.0,
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)

EDIT_FILE_TOOL = Tool(
    name="edit_file",
    annotations=ToolHints(
        destructive=True, idempotent=False, open_world=False
    ),  # served over /mcp: changes a file; a second run of the same blocks finds other text
    description="Edit a text file with SEARCH/REPLACE blocks; each SEARCH must match exactly once, or nothing changes.",
    input_model=EditFileInput,
    output_model=EditFileOutput,
    handler=edit_file,
    result_role="file_tools",
    approval=ASKS,  # it changes a file: the user sees the blocks first (SPEC 8)
    command=CommandBinding(
        name="edit_file",
        usage="/edit_file <path> (then blocks: <<<<<<< SEARCH, old lines, =======, new lines, >>>>>>> REPLACE)",
        example="/edit_file notes/todo.txt",
        args_field="path",
        body_field="edits",
    ),
    timeout_s=10.0,
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)
