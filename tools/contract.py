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
"""

from __future__ import annotations

import html

from tools.base import ToolResult

MAX_CONTRACT_CHARS = 60_000
TRUNCATION_NOTE = "[output truncated]"


def escape(text: str) -> str:
    """Escape `&`, `<`, `>` (quotes are harmless in text content and stay readable)."""
    return html.escape(text, quote=False)


def quote_lines(text: str) -> str:
    lines = text.splitlines() or [""]
    return "\n".join(f"> {escape(line)}" if line else ">" for line in lines)


def render_contract(role: str, command_line: str, result: ToolResult) -> str:
    """Render a stored tool result message (SPEC section 5)."""
    body = result.display_text()
    if len(body) > MAX_CONTRACT_CHARS:
        body = body[:MAX_CONTRACT_CHARS] + "\n" + TRUNCATION_NOTE
    safe_command = escape(" ".join(command_line.split()))
    return (
        "<details>\n"
        f"<summary>🔧 {escape(role)}</summary>\n\n"
        "```bash\n"
        f"$ {safe_command}\n"
        "```\n\n"
        f"{quote_lines(body)}\n\n"
        "</details>"
    )
