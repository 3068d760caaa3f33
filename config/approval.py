"""`TOOL_APPROVAL`, parsed: which commands ask the user before they run (SPEC 8, Approval).

The setting is a comma-separated list read left to right; each item switches a rule on
(a bare item or `+item`) or off (`-item`):

    default           the built-in set: `mcp`, `memory_sql:update`, `write_file`, `edit_file`
    none              nothing asks (only as the first item)
    all               every command asks (only as the first item; the widgets of SPEC 8 never do:
                      they are questions already)
    mcp               MCP servers' tools not annotated read-only, or annotated destructive
    mcp:all           every MCP server's tool, whatever its hints
    memory_sql:update `/memory_sql` when the statement is an UPDATE (a SELECT runs at once)
    <command>         that command, every call (`run_code`, `memory_sql`, `time_get_current_time`);
                      `-<command>` never asks for it, whatever rule would

The unset setting is `default`. Examples: `default,+run_code,-write_file`; `none`;
`write_file,edit_file` (only those two); `all,-read_file,-list_files`. A command name is
checked for its shape only: MCP servers' tools join the registry after the start.

A user may only narrow this (their settings add commands that ask, `storage/user_settings.py`);
nothing they set makes a command named here run without asking.

The decision for one call is `pipeline/approval.py`'s; this module only reads the setting,
so a mistake stops the start with an error that names the item.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

McpRule = Literal["off", "hints", "all"]
DEFAULT_APPROVAL = "default"
_DEFAULT_ITEMS = ("mcp", "memory_sql:update", "write_file", "edit_file")
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_SYNTAX = (
    "items are default, none, all, mcp, mcp:all, memory_sql:update or a command name, "
    "each optionally prefixed with + (ask) or - (never ask), e.g. default,+run_code,-write_file"
)


@dataclass(frozen=True)
class ApprovalPolicy:
    """Which calls ask first: the rules `TOOL_APPROVAL` switched on, as plain facts."""

    every_command: bool = False  # `all`
    mcp: McpRule = "off"
    memory_sql_update: bool = False
    commands: frozenset[str] = field(default_factory=frozenset)  # always ask
    exempt: frozenset[str] = field(default_factory=frozenset)  # never ask (`-name`)
    text: str = DEFAULT_APPROVAL  # as the operator wrote it, for messages

    def __str__(self) -> str:
        return self.text


def parse_approval(text: str) -> ApprovalPolicy:
    """The policy `text` names; a ValueError naming the bad item otherwise."""
    every, sql_update = False, False
    mcp: McpRule = "off"
    commands: set[str] = set()
    exempt: set[str] = set()
    items = [item.strip().lower() for item in text.split(",")]
    if not any(items):
        items = [DEFAULT_APPROVAL]
    for position, raw in enumerate(items):
        if not raw:
            raise ValueError(f"empty item in {text!r}: {_SYNTAX}")
        sign, word = (raw[0], raw[1:].strip()) if raw[0] in "+-" else ("+", raw)
        on = sign == "+"
        if word in ("none", "all"):
            if position != 0 or raw[0] in "+-":
                raise ValueError(f"{raw!r}: {word} may only be the first item, without + or -")
            every = word == "all"
            continue
        expanded = _DEFAULT_ITEMS if word == DEFAULT_APPROVAL else (word,)
        for item in expanded:
            if item == "mcp":
                mcp = ("hints" if mcp != "all" else "all") if on else "off"
            elif item == "mcp:all":
                mcp = "all" if on else ("off" if mcp == "all" else mcp)
            elif item == "memory_sql:update":
                sql_update = on
            elif _NAME.match(item):
                (commands if on else exempt).add(item)
                (exempt if on else commands).discard(item)
            else:
                raise ValueError(f"unknown item {raw!r}: {_SYNTAX}")
    return ApprovalPolicy(
        every_command=every,
        mcp=mcp,
        memory_sql_update=sql_update,
        commands=frozenset(commands),
        exempt=frozenset(exempt),
        text=text.strip() or DEFAULT_APPROVAL,
    )


def checked_approval(value: object) -> object:
    """pydantic's `BeforeValidator` for `TOOL_APPROVAL`: text is parsed, a policy kept."""
    return parse_approval(value) if isinstance(value, str) else value


def default_approval() -> ApprovalPolicy:
    return parse_approval(DEFAULT_APPROVAL)
