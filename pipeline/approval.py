"""Does this call ask the user first? (SPEC 8, Approval.) The one place that decides.

`TOOL_APPROVAL` (`config/approval.py`) names the rules; here they meet one tool and one parsed
command. In order: the widgets of SPEC 8 never ask (they are questions already); a `-name`
never asks; `all` asks; a named command asks; `/memory_sql` asks when its statement is an
UPDATE (`memory_sql:update`); an MCP server's tool (`result_role` `mcp_tools`) asks under
`mcp:all`, or under `mcp` when its hints do not say read-only, or say destructive. MCP gives
the destructive hint a meaning only for a tool that is not read-only (and `ToolHints` cannot
tell a hint the server gave from its default), so a tool annotated read-only never asks under
`mcp`. A server that says nothing gets MCP's cautious defaults (`ToolHints()`: not read-only,
destructive), so it asks.

A user may narrow this further (SPEC 8; `storage/user_settings.py`): their `UserApproval` adds
commands that ask, or every command; it has no way to say "never ask", so an operator's ask
always holds. `standing_rule` says, per command and without a call, what the operator's policy
does with it: what the settings panel shows and whether the user may change it.

Only calls the model writes in a turn ask: a direct call (`POST /tools/<name>`, `/mcp`) is the
user's own, so it runs at once.

Whether a statement is an UPDATE is read from its words outside string literals, quoted
names and comments. This is not a security rule (the database engine enforces what
`/memory_sql` may do, SPEC 6a): it only decides whether to ask, and every doubt asks (a
statement it cannot read, the word `update` anywhere outside a literal).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from commands.detect import Command
from commands.router import command_input
from config.approval import ApprovalPolicy
from storage.user_settings import UserApproval
from tools.base import BindingError, Tool, ToolHints

MCP_ROLE = "mcp_tools"
MEMORY_SQL = "memory_sql"
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_CLOSERS = {"'": "'", '"': '"', "`": "`", "[": "]"}


Standing = Literal["always", "sometimes", "never"]


def tool_names(tool: Tool[Any, Any], command: Command | None = None) -> set[str]:
    """Every name a rule may use for this tool: its own, its command's, the one written."""
    names = {tool.name.lower()}
    if tool.command is not None:
        names.add(tool.command.name.lower())
    if command is not None:
        names.add(command.name.lower())
    return names


def user_asks(tool: Tool[Any, Any], user: UserApproval | None) -> bool:
    """Whether the user's own addition makes this tool ask (never a widget: it is a question)."""
    if user is None or tool.interactive:
        return False
    return user.every_command or bool(tool_names(tool) & {name.lower() for name in user.commands})


def needs_approval(
    tool: Tool[Any, Any], command: Command, policy: ApprovalPolicy, user: UserApproval | None = None
) -> bool:
    """Whether the user approves this call before it runs: the operator's policy asks, or the
    user's addition does."""
    return operator_asks(tool, command, policy) or user_asks(tool, user)


def operator_asks(tool: Tool[Any, Any], command: Command, policy: ApprovalPolicy) -> bool:
    """Whether `TOOL_APPROVAL` alone makes this call ask."""
    if tool.interactive:
        return False
    names = tool_names(tool, command)
    if names & policy.exempt:
        return False
    if policy.every_command or names & policy.commands:
        return True
    if MEMORY_SQL in names and policy.memory_sql_update and is_update(statement_of(tool, command)):
        return True
    if tool.result_role == MCP_ROLE:
        hints = tool.annotations or ToolHints()
        risky = not hints.read_only  # destructive or not: both ask (the hint matters only here)
        return policy.mcp == "all" or (policy.mcp == "hints" and risky)
    return False


def standing_rule(tool: Tool[Any, Any], policy: ApprovalPolicy) -> Standing:
    """What `TOOL_APPROVAL` does with every call of this tool: `always` asks, `sometimes`
    (`/memory_sql` for an UPDATE), `never`. The same order of rules as `operator_asks`."""
    if tool.interactive:
        return "never"
    names = tool_names(tool)
    if names & policy.exempt:
        return "never"
    if policy.every_command or names & policy.commands:
        return "always"
    if MEMORY_SQL in names and policy.memory_sql_update:
        return "sometimes"
    if tool.result_role == MCP_ROLE:
        hints = tool.annotations or ToolHints()
        return "always" if policy.mcp == "all" or (policy.mcp == "hints" and not hints.read_only) else "never"
    return "never"


def statement_of(tool: Tool[Any, Any], command: Command) -> str | None:
    """The SQL the command gives `/memory_sql` (first line or body, as its binding reads it)."""
    if tool.command is None:
        return None
    try:
        raw = command_input(tool.command, command)
    except BindingError:
        return None
    sql = raw.get("sql")
    return sql if isinstance(sql, str) else None


def sql_words(sql: str) -> list[str] | None:
    """The bare words of `sql`, lower-cased, outside literals, quoted names and comments;
    None when a literal, a quoted name or a comment is left open."""
    words: list[str] = []
    index, size = 0, len(sql)
    while index < size:
        char = sql[index]
        if sql.startswith("--", index):
            end = sql.find("\n", index)
            index = size if end < 0 else end + 1
        elif sql.startswith("/*", index):
            end = sql.find("*/", index + 2)
            if end < 0:
                return None
            index = end + 2
        elif char in _CLOSERS:
            closer = _CLOSERS[char]
            index += 1
            while True:
                end = sql.find(closer, index)
                if end < 0:
                    return None
                if closer != "]" and sql.startswith(closer * 2, end):
                    index = end + 2  # a doubled quote is one quote inside the literal
                    continue
                index = end + 1
                break
        else:
            match = _WORD.match(sql, index)
            if match is None:
                index += 1
            else:
                words.append(match.group().lower())
                index = match.end()
    return words


def is_update(sql: str | None) -> bool:
    """Whether `sql` may be an UPDATE (every doubt says yes); None (no statement) is not."""
    if sql is None or not sql.strip():
        return False
    words = sql_words(sql)
    return words is None or "update" in words
