"""A decoding grammar for a reply's first line (SPEC 7a.1, `LLM_GRAMMAR=first_line`).

The detector (`commands/detect.py`) reads a reply as a command when its first line is
`/name args`, and as text otherwise. A small model that means to call a tool often writes
something the detector cannot take (a backtick, a misspelt name, a sentence before the slash).
A server that accepts a grammar (llama.cpp's GBNF) can rule those out while it decodes: this
grammar allows exactly

- a command of the turn's list: `/` + a registered name, optional arguments on the same line,
  and, for a command that takes a body, the lines after it; a body-less command ends with its
  first line, so the model stops there;
- or text whose first character is not `/` (after optional spaces), which the detector reads
  as an answer.

It is generated from the same list the system prompt shows, so it never allows a command the
turn does not offer. It is a decoding constraint, not a tools payload (SPEC 6.3).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tools.base import Tool

ANY = r"[^\x00]"  # any character: GBNF's classes are code points, NUL never appears in a reply


def rule_name(command: str) -> str:
    """GBNF rule names are lowercase words joined by dashes."""
    return "cmd-" + command.replace("_", "-")


def first_line_grammar(catalog: Sequence[Tool[Any, Any]], *, prose: bool = True) -> str:
    """The GBNF of a reply that is one of `catalog`'s commands or text not starting with `/`
    (with `prose=False`, one of the commands only: the decision by mass chose to call one)."""
    commands = [tool.command for tool in catalog if tool.command is not None]
    choices = ["command"] * bool(commands) + ["prose"] * (prose or not commands)
    lines = ["root ::= " + " | ".join(choices)]
    lines.append(rf"prose ::= [ \t]* [^/ \t\r\n\ufeff] {ANY}*")
    if commands:
        lines.append('command ::= "/" (' + " | ".join(rule_name(binding.name) for binding in commands) + ")")
        for binding in commands:
            body = " body?" if binding.takes_body else ""
            lines.append(f'{rule_name(binding.name)} ::= "{binding.name}" args?{body}')
        lines.append(r"args ::= [ \t]+ [^ \t\r\n] [^\r\n]*")
        lines.append(rf'body ::= "\n" {ANY}*')
    return "\n".join(lines) + "\n"


def prose_grammar() -> str:
    """Text whose first character is not `/`: the decision by mass chose to answer in prose."""
    return first_line_grammar(())


def exact_grammar(text: str) -> str:
    """Exactly `text` (a command's `/name `, to read the model's score for it)."""
    return "root ::= " + json.dumps(text) + "\n"
