"""The one place that reads model text: is the first line of a reply a `/command`?

SPEC section 5: the first line, after trimming spaces and a BOM, must match
`^/([A-Za-z][A-Za-z0-9_]*)(?:\\s+(.*))?$`. Anything before it (a blank line, prose, a
code fence) means plain text. The lines after the first are the body, with one
surrounding ``` fence removed. Nothing here raises: every string is either a `Command`
or `None`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMMAND_LINE = re.compile(r"^/([A-Za-z][A-Za-z0-9_]*)(?:\s+(.*))?$", re.DOTALL)
_TRIM = " \t\ufeff"
_FENCE = "```"


@dataclass(frozen=True)
class Command:
    """A parsed command reply. `name` is lower-cased; `line` is the trimmed first line."""

    name: str
    args: str
    body: str
    line: str


def first_line_and_rest(text: str) -> tuple[str, str]:
    """Split at the first line break (\\n, \\r\\n or \\r); the rest excludes the break."""
    match = re.search(r"\r\n|\r|\n", text)
    if match is None:
        return text, ""
    return text[: match.start()], text[match.end() :]


def strip_fence(body: str) -> str:
    """Remove ONE fence that surrounds the whole body (```lang … ```), else keep it as is."""
    lines = body.strip("\r\n").splitlines()
    if len(lines) >= 2 and lines[0].strip().startswith(_FENCE) and lines[-1].strip() == _FENCE:
        return "\n".join(lines[1:-1])
    return "\n".join(lines)


def detect_command(reply: str | None) -> Command | None:
    """Return the command a reply starts with, or None for plain text."""
    if not reply:
        return None
    first, rest = first_line_and_rest(reply)
    line = first.strip(_TRIM)
    match = COMMAND_LINE.match(line)
    if match is None:
        return None
    name, args = match.group(1), (match.group(2) or "").strip()
    return Command(name=name.lower(), args=args, body=strip_fence(rest), line=line)
