"""The markdown contract: how a tool result is stored and shown.

    <details>
    <summary>🔧 web_search_tools</summary>

    ```bash
    $ /web_search mars rover
    ```

    > first line of the result

    </details>

Every result line is quoted with `> ` and `&`, `<`, `>` are HTML-escaped, so nothing a
tool returns (a web page, a file, a model's own command line) can close the block or
inject markup. The command line is escaped too, and backticks in it cannot end the fence
because it is placed on its own line after `$ ` and fences need three at line start.

The stored text is at most `MAX_CONTRACT_BYTES` (64 KiB, SPEC 12) of UTF-8, counted after
escaping and quoting (a result of `<` or of empty lines grows four- or twofold on the way):
a longer result keeps its beginning and ends with the quoted `TRUNCATION_NOTE`.
`stored_result` is the one builder of what a tool result message holds (content and meta),
for chat commands and for answered widgets alike.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

from foundation.text_safety import replace_surrogates
from tools.base import ToolResult
from tools.meta import ToolMeta
from tools.result_caps import MAX_CONTRACT_BYTES, bounded

TRUNCATION_NOTE = "[output truncated: the result was longer than 64 KiB]"
MAX_COMMAND_CHARS = 600  # the detector keeps command lines under 512 characters
MAX_BODY_CHARS = MAX_CONTRACT_BYTES  # a command body kept in `meta` (SPEC 12)
_NOTE_LINE = f"> {TRUNCATION_NOTE}"
_PARTIAL_ENTITY = re.compile(r"&[a-z]{0,3}$")


@dataclass(frozen=True)
class StoredResult:
    """What a `<tool>_tools` message holds: the contract text and its `meta`."""

    content: str
    tool_meta: ToolMeta

    @property
    def meta(self) -> dict[str, Any]:
        """The `meta` JSON object as stored (`ToolMeta.stored`)."""
        return self.tool_meta.stored()


def escape(text: str) -> str:
    """Escape `&`, `<`, `>` (quotes are harmless in text content and stay readable)."""
    return html.escape(text, quote=False)


def quote_lines(text: str) -> str:
    lines = text.splitlines() or [""]
    return "\n".join(f"> {escape(line)}" if line else ">" for line in lines)


def quote_within(text: str, budget: int) -> str:
    """`quote_lines(text)` in at most `budget` bytes of UTF-8, cut with the note when longer.

    Every character of `text` yields at least one byte, so only its first `budget`
    characters are ever quoted; a cut never splits a character or an `&lt;` entity.
    """
    quoted = quote_lines(text[:budget])
    encoded = quoted.encode("utf-8")
    if len(text) <= budget and len(encoded) <= budget:
        return quoted
    room = max(0, budget - len(_NOTE_LINE.encode("utf-8")) - 1)
    kept = _PARTIAL_ENTITY.sub("", encoded[:room].decode("utf-8", errors="ignore"))
    return f"{kept}\n{_NOTE_LINE}" if kept else _NOTE_LINE


def render_contract(role: str, command_line: str, result: ToolResult) -> str:
    """Render a stored tool result message (SPEC section 5), at most `MAX_CONTRACT_BYTES`."""
    command = " ".join(command_line.split())
    if len(command) > MAX_COMMAND_CHARS:
        command = command[:MAX_COMMAND_CHARS] + "…"
    safe_command = escape(command)
    head = f"<details>\n<summary>🔧 {escape(role)}</summary>\n\n```bash\n$ {safe_command}\n```\n\n"
    tail = "\n\n</details>"
    budget = MAX_CONTRACT_BYTES - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}{quote_within(result.display_text(), budget)}{tail}"


def command_text(args: str, body: str) -> dict[str, Any]:
    """The parsed command's argument text and body as `meta` keys (`args`, `body`,
    `body_truncated`), so a client can show what ran (the SQL, the program, the file content)
    without re-parsing the contract text, whose command line is one line only. The body is
    kept to `MAX_BODY_CHARS` characters: it is stored once but read with every message page."""
    meta: dict[str, Any] = {"args": replace_surrogates(args[:MAX_COMMAND_CHARS])}
    if body:
        meta["body"] = replace_surrogates(body[:MAX_BODY_CHARS])
        meta["body_truncated"] = len(body) > MAX_BODY_CHARS
    return meta


def stored_result(role: str, command: str, command_line: str, result: ToolResult, **extra: Any) -> StoredResult:
    """The message for one tool result: the contract text and a `ToolMeta` whose structured
    output is bounded too (`tools/result_caps.py`); `extra` adds the caller's keys (the
    SPEC 8 call keys, `command_text`), validated with the rest."""
    result, command_line = bounded(result), replace_surrogates(command_line)
    meta: dict[str, Any] = {
        "command": command,
        "command_line": command_line,
        "tool": result.tool,
        "ok": result.ok,
        "duration_ms": result.duration_ms,
    }
    if result.ok:
        meta["output"] = result.output
    else:
        meta.update(code=result.error_code, message=result.message)
    meta.update(extra)
    return StoredResult(render_contract(role, command_line, result), ToolMeta.model_validate(meta))
