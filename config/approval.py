"""`TOOL_APPROVAL`, parsed: which commands ask the user before they run (SPEC 8, Approval).

Each tool declares whether a call asks (`tools.base.Approval`: never, always, or when a
condition over its input holds); this setting says which of those declarations count, and
adds or removes commands. It is a comma-separated list read left to right; each item switches
a rule on (a bare item or `+item`) or off (`-item`):

    default           every tool's own declaration: the built-in tools' (`/write_file`,
                      `/edit_file` always; `/memory_sql` when the engine reads the statement as
                      an UPDATE) and the MCP servers' tools' (`mcp`)
    none              nothing asks (only as the first item)
    all               every command asks (only as the first item; the widgets of SPEC 8 never do:
                      they are questions already)
    mcp               MCP servers' tools, as they declare it: the ones not annotated read-only
    mcp:all           every MCP server's tool, whatever its hints
    <command>:<cond>  that command's declared condition (`memory_sql:update`), even without
                      `default`; `-<command>:<cond>` switches it off
    <command>         that command, every call (`run_code`, `memory_sql`, `time_get_current_time`);
                      `-<command>` never asks for it, whatever rule would

The unset setting is `default`. Examples: `default,+run_code,-write_file`; `none`;
`write_file,edit_file` (only those two); `all,-read_file,-list_files`. A command name is
checked for its shape only: MCP servers' tools join the registry after the start, and no tool
is named here: what a tool does is declared beside it.

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
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_RESERVED = frozenset({"default", "none", "all", "mcp"})  # the setting's own words, never a command here
_SYNTAX = (
    "items are default, none, all, mcp, mcp:all, <command>:<condition> (memory_sql:update) or a command "
    "name, each optionally prefixed with + (ask) or - (never ask), e.g. default,+run_code,-write_file"
)


@dataclass(frozen=True)
class ApprovalPolicy:
    """Which calls ask first: the rules `TOOL_APPROVAL` switched on, as plain facts."""

    every_command: bool = False  # `all`
    declared: bool = False  # the built-in tools' own declarations (`default`)
    mcp: McpRule = "off"
    conditions: tuple[tuple[str, str, bool], ...] = ()  # (command, condition, on), in order
    commands: frozenset[str] = field(default_factory=frozenset)  # always ask
    exempt: frozenset[str] = field(default_factory=frozenset)  # never ask (`-name`)
    text: str = DEFAULT_APPROVAL  # as the operator wrote it, for messages

    def __str__(self) -> str:
        return self.text

    def condition_rule(self, names: set[str], condition: str) -> bool | None:
        """The last `<command>:<condition>` item naming one of `names` and this condition
        (True on, False off), None when there is none."""
        rule: bool | None = None
        for command, cond, on in self.conditions:
            if command in names and cond == condition:
                rule = on
        return rule


def parse_approval(text: str) -> ApprovalPolicy:
    """The policy `text` names; a ValueError naming the bad item otherwise."""
    every, declared = False, False
    mcp: McpRule = "off"
    conditions: list[tuple[str, str, bool]] = []
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
        elif word == DEFAULT_APPROVAL:
            declared = on
            mcp = ("hints" if mcp != "all" else "all") if on else "off"
        elif word == "mcp":
            mcp = ("hints" if mcp != "all" else "all") if on else "off"
        elif word == "mcp:all":
            mcp = "all" if on else ("off" if mcp == "all" else mcp)
        elif ":" in word:
            command, _, condition = word.partition(":")
            if command in _RESERVED or not (_NAME.match(command) and _NAME.match(condition)):
                raise ValueError(f"unknown item {raw!r}: {_SYNTAX}")
            conditions.append((command, condition, on))
        elif _NAME.match(word):
            (commands if on else exempt).add(word)
            (exempt if on else commands).discard(word)
        else:
            raise ValueError(f"unknown item {raw!r}: {_SYNTAX}")
    return ApprovalPolicy(
        every_command=every,
        declared=declared,
        mcp=mcp,
        conditions=tuple(conditions),
        commands=frozenset(commands),
        exempt=frozenset(exempt),
        text=text.strip() or DEFAULT_APPROVAL,
    )


def checked_approval(value: object) -> object:
    """pydantic's `BeforeValidator` for `TOOL_APPROVAL`: text is parsed, a policy kept."""
    return parse_approval(value) if isinstance(value, str) else value


def default_approval() -> ApprovalPolicy:
    return parse_approval(DEFAULT_APPROVAL)
