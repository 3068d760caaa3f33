"""SEARCH/REPLACE edit blocks for `/edit_file`: parse them, then apply them all or none.

The body of `/edit_file <path>` is one or more blocks:

    <<<<<<< SEARCH
    exact lines now in the file
    =======
    the lines to put there instead
    >>>>>>> REPLACE

Markers are exactly 7 characters (`<<<<<<< SEARCH`, `=======`, `>>>>>>> REPLACE`, trailing
spaces ignored); only blank lines may appear between blocks. A line that looks like a
marker but is not one (`<<<<<< SEARCH`) is reported, not taken as content, because it is
almost always a typo. A consequence: a line of exactly `=======` cannot be edited with
this format (rewrite the file with `/write_file`).

Blocks apply in order, each to the result of the previous ones. Each SEARCH text must
occur exactly once (overlapping occurrences count), otherwise the whole edit fails and
the message names the block, the count and how to fix it. Pure functions: no I/O here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.base import ErrorCode, ToolFailure

SEARCH_MARKER = "<<<<<<< SEARCH"
DIVIDER = "======="
REPLACE_MARKER = ">>>>>>> REPLACE"
MAX_BLOCKS = 50
FORMAT_HINT = (
    "Each block is: a line '<<<<<<< SEARCH', the exact current lines, a line '=======', "
    "the new lines, a line '>>>>>>> REPLACE'."
)
_NEAR_MISS = re.compile(r"^\s*[<>]{3,}\s*(?:SEARCH|REPLACE)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class EditBlock:
    number: int
    search: str
    replace: str


def _malformed(message: str) -> ToolFailure:
    return ToolFailure(ErrorCode.VALIDATION_FAILED, f"malformed edit: {message} Nothing was written. {FORMAT_HINT}")


def parse_blocks(body: str) -> list[EditBlock]:
    """Split an edit body into blocks; raise VALIDATION_FAILED naming the line on any error."""
    blocks: list[EditBlock] = []
    state = "out"
    search: list[str] = []
    replace: list[str] = []
    lines = body.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip()
        block = len(blocks) + 1
        is_marker = line in (SEARCH_MARKER, DIVIDER, REPLACE_MARKER)
        if not is_marker and _NEAR_MISS.match(line):
            raise _malformed(f"line {number} ({line.strip()!r}) looks like a marker but is not exactly one.")
        if state == "out":
            if line == SEARCH_MARKER:
                state, search, replace = "search", [], []
            elif is_marker:
                raise _malformed(f"line {number}: {line!r} outside a block; every block starts with '{SEARCH_MARKER}'.")
            elif line.strip():
                raise _malformed(f"line {number}: text outside a block; only blank lines may separate blocks.")
        elif state == "search":
            if line == DIVIDER:
                state = "replace"
            elif is_marker:
                raise _malformed(f"block {block}: {line!r} at line {number} before its '{DIVIDER}' line.")
            else:
                search.append(raw)
        else:
            if line == REPLACE_MARKER:
                if not "".join(search).strip():
                    raise _malformed(
                        f"block {block}: the SEARCH part is empty; copy the exact lines to change (or use /write_file)."
                    )
                blocks.append(EditBlock(block, "\n".join(search), "\n".join(replace)))
                state = "out"
                if len(blocks) > MAX_BLOCKS:
                    raise _malformed(f"more than {MAX_BLOCKS} blocks; split the edit into several calls.")
            elif is_marker:
                raise _malformed(f"block {block}: {line!r} at line {number} before its '{REPLACE_MARKER}' line.")
            else:
                replace.append(raw)
    if state != "out":
        closing = DIVIDER if state == "search" else REPLACE_MARKER
        raise _malformed(f"block {len(blocks) + 1} is not closed: the '{closing}' line is missing.")
    if not blocks:
        raise _malformed("no edit blocks found in the body.")
    return blocks


def find_all(content: str, needle: str) -> list[int]:
    """Every start offset of `needle`, overlapping ones included (both make SEARCH ambiguous)."""
    found, start = [], content.find(needle)
    while start != -1:
        found.append(start)
        start = content.find(needle, start + 1)
    return found


def _squash(text: str) -> str:
    return "\n".join(line.strip() for line in text.split("\n"))


def apply_blocks(content: str, blocks: list[EditBlock], shown: str) -> str:
    """The content after every block, or ToolFailure for the first block that does not match once."""
    newline = "\r\n" if "\r\n" in content and content.count("\r\n") == content.count("\n") else "\n"
    total = len(blocks)
    for block in blocks:
        search = block.search.replace("\n", newline)
        replace = block.replace.replace("\n", newline)
        where = f"edit block {block.number} of {total}"
        after = f" (after applying blocks 1-{block.number - 1})" if block.number > 1 else ""
        positions = find_all(content, search)
        if not positions:
            hint = ""
            if _squash(search).strip() and _squash(search) in _squash(content):
                hint = " It would match if indentation/trailing spaces were ignored: copy the whitespace exactly."
            raise ToolFailure(
                ErrorCode.VALIDATION_FAILED,
                f"{where}: the SEARCH text matches 0 times in {shown}{after}. Nothing was written.{hint} "
                f"Copy the current lines exactly (see /read_file {shown}).",
            )
        if len(positions) > 1:
            lines = ", ".join(str(content.count("\n", 0, position) + 1) for position in positions[:10])
            raise ToolFailure(
                ErrorCode.VALIDATION_FAILED,
                f"{where}: the SEARCH text matches {len(positions)} times in {shown}{after} (at lines {lines}). "
                "Nothing was written. Include more surrounding lines in SEARCH to make it unique.",
            )
        start = positions[0]
        end = start + len(search)
        whole_lines = (start == 0 or content[start - 1] == "\n") and content.startswith(newline, end)
        if not replace and whole_lines:
            end += len(newline)  # deleting whole lines removes their line break too
        content = content[:start] + replace + content[end:]
    return content
