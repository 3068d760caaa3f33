"""What `/mcp` offers as resources: one user's memories and workspace files, listed in pages
and read under caps (MCP `resources/list`, `resources/read`, `resources/templates/list`).

Everything here is blocking and scoped to one user by a `ToolContext` (the user from the
bearer token, as for a tool call): memories through `storage/memories.py`, which filters by
user, files through the workspace's own path checks and descriptor-relative reads
(`tools/workspace/`), the same code `read_file` and `list_files` run. Another user's memory
and a missing one are the same `NOT_FOUND`, so ids reveal nothing.

Caps, per read, chosen to fit a host's context window and a JSON-RPC answer well under
`/mcp`'s 8 MiB body cap (figures in README's MCP section):

- `TEXT_CAP` (64 KiB of UTF-8) for a text file or a memory: a larger file is refused with
  `VALIDATION_FAILED` naming the `read_file` tool, which reads it by line ranges.
- `BLOB_CAP` (256 KiB) for a binary file (a NUL byte or invalid UTF-8), sent base64.
- `PAGE_SIZE` resources per `resources/list` page: memories newest first, then files by path.
  The cursor is opaque to hosts (base64 of a small JSON value) and checked when it comes back.

Failures are `Problem` values with a tool error code; the endpoint turns them into JSON-RPC
errors.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import os
from dataclasses import dataclass, field
from typing import Any, Literal

import mcp_types as types
from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_server.resource_uris import (
    FILE_TEMPLATE,
    MEMORY_TEMPLATE,
    FileRef,
    UriProblem,
    file_uri,
    memory_uri,
    parse_uri,
)
from storage.memories import Memory, get_memory, list_memories
from tools.base import ErrorCode, ToolContext, ToolFailure
from tools.workspace.fs import FileEntry, decode_text, read_bytes, walk_workspace
from tools.workspace.paths import resolve_path, workspace_root

TEXT_CAP = 64 * 1024
BLOB_CAP = 256 * 1024
PAGE_SIZE = 50
MAX_CURSOR_CHARS = 1024
TITLE_CHARS = 60  # of a memory's content, as its title in a listing
MEMORY_MIME = "text/plain"


@dataclass(frozen=True)
class Problem:
    """Why a resource (or prompt) request failed: a tool error code, a message saying how to
    fix it, and details for a program (the URI, the cap)."""

    code: str  # an `ErrorCode`, or an HTTP refusal's code (`rate_limited`, a dependency's)
    message: str
    details: dict[str, Any] = field(default_factory=dict)


class Cursor(BaseModel):
    """Where the next page starts: the memories older than `before_id`, or the files after
    `after_path` (memories come first)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    part: Literal["memories", "files"]
    before_id: int | None = None
    after_path: str = ""

    def encode(self) -> str:
        return base64.urlsafe_b64encode(self.model_dump_json(exclude_defaults=True).encode()).decode()


FIRST_PAGE = Cursor(part="memories")


def decode_cursor(text: str | None) -> Cursor | Problem:
    if text is None:
        return FIRST_PAGE
    try:
        if len(text) > MAX_CURSOR_CHARS:
            raise ValueError("too long")
        return Cursor.model_validate_json(base64.urlsafe_b64decode(text.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error, ValidationError):
        return Problem(ErrorCode.VALIDATION_FAILED, "the cursor is not one this server gave; list from the start")


def templates() -> list[types.ResourceTemplate]:
    """The two URI shapes, so a host can read a resource it did not list (`resources/templates/list`)."""
    return [
        types.ResourceTemplate(
            name="memory",
            title="A memory",
            uri_template=MEMORY_TEMPLATE,
            description="One of your memories (what /remember stored), by its id.",
            mime_type=MEMORY_MIME,
        ),
        types.ResourceTemplate(
            name="workspace_file",
            title="A workspace file",
            uri_template=FILE_TEMPLATE,
            description=f"A file of your workspace, by its path (text up to {TEXT_CAP // 1024} KiB, "
            f"binary up to {BLOB_CAP // 1024} KiB; read larger ones with the read_file tool).",
        ),
    ]


def memory_resource(memory: Memory) -> types.Resource:
    title = " ".join(memory.content.split())
    title = title if len(title) <= TITLE_CHARS else title[: TITLE_CHARS - 1] + "…"
    return types.Resource(
        name=f"memory-{memory.id}",
        title=title,
        uri=memory_uri(memory.id),
        description=f"A memory (importance {memory.importance}), stored {memory.created_at}",
        mime_type=MEMORY_MIME,
        size=len(memory.content.encode()),
    )


def file_resource(entry: FileEntry) -> types.Resource:
    return types.Resource(
        name=entry.path,
        uri=file_uri(entry.path),
        description="A file of your workspace",
        mime_type=mimetypes.guess_type(entry.path)[0],
        size=entry.size,
    )


def list_page(ctx: ToolContext, cursor: str | None, page_size: int = PAGE_SIZE) -> types.ListResourcesResult | Problem:
    """One page of the user's resources: memories newest first, then files by path."""
    position = decode_cursor(cursor)
    if isinstance(position, Problem):
        return position
    listed: list[types.Resource] = []
    after_path = position.after_path
    if position.part == "memories":
        memories = list_memories(ctx.conn, ctx.user_id, page_size + 1, before=position.before_id)
        listed = [memory_resource(memory) for memory in memories[:page_size]]
        if len(memories) > page_size:
            following = Cursor(part="memories", before_id=memories[page_size - 1].id)
            return types.ListResourcesResult(resources=listed, next_cursor=following.encode())
        after_path = ""
    room = page_size - len(listed)
    files = [
        entry for entry in walk_workspace(workspace_root(ctx.settings, ctx.user_id)).files if entry.path > after_path
    ]
    listed += [file_resource(entry) for entry in files[:room]]
    following_files = None
    if len(files) > room:
        following_files = Cursor(part="files", after_path=files[room - 1].path if room else after_path).encode()
    return types.ListResourcesResult(resources=listed, next_cursor=following_files)


def read(ctx: ToolContext, uri: str) -> types.ReadResourceResult | Problem:
    """The content of one resource of the user's, within the caps."""
    ref = parse_uri(uri)
    if isinstance(ref, UriProblem):
        return Problem(ErrorCode.NOT_FOUND, ref.message, {"uri": uri})
    if isinstance(ref, FileRef):
        return read_file(ctx, uri, ref)
    memory = get_memory(ctx.conn, ctx.user_id, ref.memory_id)
    if memory is None:
        return Problem(
            ErrorCode.NOT_FOUND, f"you have no memory {ref.memory_id}; resources/list lists yours", {"uri": uri}
        )
    if len(memory.content.encode()) > TEXT_CAP:
        return too_large(uri, len(memory.content.encode()), TEXT_CAP)
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, mime_type=MEMORY_MIME, text=memory.content)]
    )


def read_file(ctx: ToolContext, uri: str, ref: FileRef) -> types.ReadResourceResult | Problem:
    try:
        target = resolve_path(workspace_root(ctx.settings, ctx.user_id), ref.path)
        try:
            size = os.lstat(target.absolute).st_size
        except OSError:
            size = 0  # missing or unusable: read_bytes says which
        if size > BLOB_CAP:  # before reading: read_bytes below enforces it again, race or not
            return too_large(uri, size, BLOB_CAP)
        data = read_bytes(target, limit=BLOB_CAP)
    except ToolFailure as failure:
        return Problem(failure.code, failure.message, {"uri": uri})
    text = decode_text(data)
    guessed = mimetypes.guess_type(ref.path)[0]
    if text is None:
        blob = base64.b64encode(data).decode("ascii")
        mime = guessed or "application/octet-stream"
        return types.ReadResourceResult(contents=[types.BlobResourceContents(uri=uri, mime_type=mime, blob=blob)])
    if len(data) > TEXT_CAP:
        return too_large(uri, len(data), TEXT_CAP)
    mime = guessed if guessed is not None and is_textual(guessed) else "text/plain"
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])


def is_textual(mime: str) -> bool:
    return mime.startswith("text/") or mime in ("application/json", "application/xml", "application/javascript")


def too_large(uri: str, size: int, cap: int) -> Problem:
    message = (
        f"the resource is {size} bytes, over the {cap // 1024} KiB a read returns; "
        "read a file in parts with the read_file tool (start_line, end_line)"
    )
    return Problem(ErrorCode.VALIDATION_FAILED, message, {"uri": uri, "size": size, "limit_bytes": cap})
