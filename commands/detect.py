"""The one place that reads model text: is the first line of a reply a `/command`?

SPEC section 5: the first line, after trimming spaces and a BOM, must match
`^/([A-Za-z][A-Za-z0-9_]*)(?:\\s+(.*))?$`. Anything before it (a blank line, prose, a
code fence) means plain text, and so does a first line longer than `MAX_COMMAND_LINE`
characters (the streaming gate holds a reply back for at most that long, SPEC 7a.2). The lines after the first are the body, with one
surrounding ``` fence removed. Nothing here raises: every string is either a `Command`
or `None`.

A name longer than `MAX_COMMAND_NAME` cannot be a registered command, but it is still a
well-formed one (SPEC 5: an unknown command gets an error result, not plain text). Its
`Command.name` keeps only the first `MAX_COMMAND_NAME` characters and ends with `…`, which
no registered name contains: every place that echoes a name (events, errors, the stored
`meta`) is bounded without having to remember to cut it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_COMMAND_LINE = 512  # a longer first line is text (SPEC 7a.2): nothing is held back longer
MAX_COMMAND_NAME = 64  # registered names are a few words; a longer one is echoed cut
COMMAND_LINE = re.compile(r"^/([A-Za-z][A-Za-z0-9_]*)(?:\s+(.*))?$", re.DOTALL)
_TRIM = " \t\ufeff"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_FENCE_LINE = re.compile(r"^(`{3,})([^`]*)$")


@dataclass(frozen=True)
class Command:
    """A parsed command reply. `name` is lower-cased (and cut, see above); `line` is the
    trimmed first line, at most `MAX_COMMAND_LINE` characters."""

    name: str
    args: str
    body: str
    line: str


def first_line_and_rest(text: str) -> tuple[str, str]:
    """Split at the first line break (\\n, \\r\\n or \\r); the rest excludes the break."""
    match = _LINE_BREAK.search(text)
    if match is None:
        return text, ""
    return text[: match.start()], text[match.end() :]


def _fence(line: str) -> tuple[int, str] | None:
    """(backtick count, info string) when `line` is a ``` fence line, else None."""
    match = _FENCE_LINE.match(line.strip())
    return None if match is None else (len(match.group(1)), match.group(2).strip())


def _surrounded(lines: list[str]) -> bool:
    """Does the first line open a fence that only the last line closes?

    Inside, a fence line with an info string (```python) opens a nested block and a bare
    fence closes the innermost open one, so a nested block stays in the body while two
    separate blocks (```…```, text, ```…```) are not mistaken for one surrounding fence.
    """
    opener, closer = _fence(lines[0]), _fence(lines[-1])
    if opener is None or closer is None or closer[1] or closer[0] < opener[0]:
        return False
    depth = 0
    for line in lines[1:-1]:
        fence = _fence(line)
        if fence is None:
            continue
        if fence[1]:
            depth += 1
        elif depth:
            depth -= 1
        elif fence[0] >= opener[0]:
            return False  # the outer block ends before the last line
    return depth == 0


def strip_fence(body: str) -> str:
    """Remove ONE fence that surrounds the whole body (```lang … ```), else keep it as is.

    Lines are split on \\n, \\r\\n and \\r only (not `str.splitlines`, which would also
    break at form feeds and other control characters inside the content) and joined with
    \\n; blank lines around the body are dropped.
    """
    lines = _LINE_BREAK.split(body)
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) >= 2 and _surrounded(lines):
        lines = lines[1:-1]
    return "\n".join(lines)


def detect_command(reply: str | None) -> Command | None:
    """Return the command a reply starts with, or None for plain text."""
    if not reply:
        return None
    first, rest = first_line_and_rest(reply)
    if len(first) > MAX_COMMAND_LINE:
        return None
    line = first.strip(_TRIM)
    match = COMMAND_LINE.match(line)
    if match is None:
        return None
    name, args = match.group(1).lower(), (match.group(2) or "").strip()
    if len(name) > MAX_COMMAND_NAME:
        name = name[:MAX_COMMAND_NAME] + "…"
    return Command(name=name, args=args, body=strip_fence(rest), line=line)
