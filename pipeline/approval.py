"""Does this call ask the user first? (SPEC 8, Approval.) The one place that decides.

A tool declares whether a call asks (`Tool.approval`: never, always, or when a condition over
its validated input holds) and where it comes from (`Tool.origin`); `TOOL_APPROVAL`
(`config/approval.py`) says which declarations count and names commands to add or remove.
Nothing here knows a tool by name. In order:

1. the widgets of SPEC 8 never ask (they are questions already);
2. a `-name` never asks; `all` or a named command always asks;
3. an MCP server's tool: `mcp:all` asks; `mcp` counts its declaration (from its hints);
4. a built-in tool: its declaration counts under `default`, or under its own
   `<command>:<condition>` item; an `always` declaration asks; a `when` declaration asks when
   its condition holds for this input. The condition may be the engine's own reading of the
   call (`/memory_sql`: does the database classify the statement as an UPDATE?): a call the
   engine refuses is refused at once, without asking (`Verdict.refused`), and a call that runs
   because the condition said "no write" runs with `writes_allowed` False, so its engine
   refuses a write rather than make one the user never saw;
5. the user's own settings (`UserApproval`) add commands that ask, or every command; they
   have no way to say "never ask", so an operator's ask always holds.

`standing_rule` says, per command and without a call, what the operator's policy does with it:
what the settings panel shows and whether the user may change it.

Only calls the model writes in a turn ask: a direct call (`POST /tools/<name>`, `/mcp`) is the
user's own, so it runs at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from commands.detect import Command
from commands.router import command_input
from config.approval import ApprovalPolicy
from storage.user_settings import UserApproval
from tools.base import BindingError, Tool, ToolContext, ToolFailure

Standing = Literal["always", "sometimes", "never"]


@dataclass(frozen=True)
class Verdict:
    """What happens to one call: it runs, it asks first, or it is refused at once."""

    kind: Literal["run", "ask", "refuse"]
    writes_allowed: bool = True  # False: it runs because its condition said it changes nothing
    failure: ToolFailure | None = None  # why it is refused

    @classmethod
    def refused(cls, failure: ToolFailure) -> Verdict:
        return cls("refuse", failure=failure)


RUN = Verdict("run")
ASK = Verdict("ask")
RUN_READING = Verdict("run", writes_allowed=False)


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


def declaration_counts(tool: Tool[Any, Any], names: set[str], policy: ApprovalPolicy) -> bool:
    """Whether the policy lets the tool's own declaration decide (rules 3 and 4)."""
    if tool.origin == "mcp":
        return policy.mcp == "hints"
    if tool.approval.mode == "when":
        rule = policy.condition_rule(names, tool.approval.condition)
        return policy.declared if rule is None else rule
    return policy.declared


def forced(tool: Tool[Any, Any], names: set[str], policy: ApprovalPolicy) -> Standing | None:
    """Rules 1 to 3 where they settle the call without its input; None when they do not."""
    if tool.interactive or names & policy.exempt:
        return "never"
    if policy.every_command or names & policy.commands:
        return "always"
    if tool.origin == "mcp" and policy.mcp == "all":
        return "always"
    return None


def validated_input(tool: Tool[Any, Any], command: Command) -> Any | None:
    """The call's input as the tool will get it, or None when it would fail validation (that
    call is answered with its error at once, never put to the user)."""
    if tool.command is None:
        return None
    try:
        return tool.input_model.model_validate(command_input(tool.command, command))
    except (BindingError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


def decide(
    tool: Tool[Any, Any],
    command: Command,
    ctx: ToolContext,
    policy: ApprovalPolicy,
    user: UserApproval | None = None,
) -> Verdict:
    """The verdict on one call the model wrote (see the module docstring for the order)."""
    names = tool_names(tool, command)
    settled = forced(tool, names, policy)
    if settled == "never":
        return RUN
    declared = tool.approval
    asks = settled == "always" or user_asks(tool, user)
    counts = declared.mode != "never" and declaration_counts(tool, names, policy)
    if not (asks or counts):
        return RUN  # nothing could ask: the input is validated once, by the runner
    data = validated_input(tool, command)
    if data is None:
        return RUN  # the router answers its validation error
    if asks or declared.mode == "always" or declared.holds is None:
        return ASK
    try:
        return ASK if declared.holds(data, ctx) else RUN_READING
    except ToolFailure as failure:
        return Verdict.refused(failure)


def standing_rule(tool: Tool[Any, Any], policy: ApprovalPolicy) -> Standing:
    """What `TOOL_APPROVAL` does with every call of this tool: `always` asks, `sometimes`
    (a declared condition, e.g. `/memory_sql` for an UPDATE), `never`. Rules 1 to 4 of `decide`."""
    names = tool_names(tool)
    settled = forced(tool, names, policy)
    if settled is not None:
        return settled
    declared = tool.approval
    if declared.mode == "never" or not declaration_counts(tool, names, policy):
        return "never"
    return "sometimes" if declared.mode == "when" else "always"
