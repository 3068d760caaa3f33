"""The URIs of `/mcp`'s resources: what a URI names, parsed once, and the templates that say so.

Two kinds, both the authenticated user's own, never another's (the user comes from the token,
not from the URI, so a URI cannot name a user):

- `orchestrator://memories/<id>`: one of the user's memories (`storage/memories.py`).
- `file:///<path>`: a file of the user's workspace, `<path>` relative to its root and
  percent-encoded (`file:///notes/plan%20v2.txt`). The path is checked later by the one place
  that turns text into a workspace path (`tools/workspace/paths.py`), as for `read_file`.

A URI that is neither is a `UriProblem`, a value: the endpoint turns it into the JSON-RPC error
(-32602 with the URI in `data`, as SEP-2164 asks for a resource that does not exist).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

MEMORY_SCHEME = "orchestrator"
MEMORY_HOST = "memories"
MEMORY_TEMPLATE = f"{MEMORY_SCHEME}://{MEMORY_HOST}/{{id}}"
FILE_TEMPLATE = "file:///{+path}"  # RFC 6570 reserved expansion: the path keeps its slashes
MAX_URI_CHARS = 2048


@dataclass(frozen=True)
class MemoryRef:
    memory_id: int


@dataclass(frozen=True)
class FileRef:
    path: str  # relative to the workspace root, decoded; not checked yet


@dataclass(frozen=True)
class UriProblem:
    message: str


def memory_uri(memory_id: int) -> str:
    return f"{MEMORY_SCHEME}://{MEMORY_HOST}/{memory_id}"


def file_uri(path: str) -> str:
    return "file:///" + quote(path, safe="/")


def parse_uri(uri: str) -> MemoryRef | FileRef | UriProblem:
    """What `uri` names, or why it names nothing of ours (with the shapes that would)."""
    expected = f"expected {MEMORY_TEMPLATE} or {FILE_TEMPLATE} (resources/templates/list)"
    if len(uri) > MAX_URI_CHARS:
        return UriProblem(f"the URI is {len(uri)} characters long, over {MAX_URI_CHARS}; {expected}")
    try:
        parts = urlsplit(uri)
    except ValueError:
        return UriProblem(f"{uri[:200]!r} is not a URI; {expected}")
    if parts.query or parts.fragment:
        return UriProblem(f"{uri[:200]!r} has a query or fragment, which no resource of ours has; {expected}")
    if parts.scheme == MEMORY_SCHEME and parts.netloc == MEMORY_HOST:
        digits = parts.path.removeprefix("/")
        if not digits.isascii() or not digits.isdigit() or len(digits) > 18:
            return UriProblem(f"{uri[:200]!r}: a memory's id is a positive integer; {expected}")
        return MemoryRef(int(digits))
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        path = unquote(parts.path).removeprefix("/")
        if not path:
            return UriProblem(f"{uri[:200]!r} names the workspace itself, not a file in it; {expected}")
        return FileRef(path)
    return UriProblem(f"{uri[:200]!r} is not a resource of this server; {expected}")
