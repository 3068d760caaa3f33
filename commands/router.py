"""Route a detected `Command` to its tool and return the role and result to store.

The role comes from the registry (`tool.result_role`), never from model text. An unknown
but well-formed command is not plain text: it becomes a `router_tools` error listing the
valid commands, so the second pass can recover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from commands.detect import Command
from storage.roles import ROUTER_TOOLS
from tools.base import FIX_HINT, BindingError, CommandBinding, ErrorCode, ToolContext, ToolFailure, ToolResult
from tools.registry import ToolRegistry
from tools.runner import run_tool, usage_hint

ROUTER_ROLE = ROUTER_TOOLS


@dataclass(frozen=True)
class Routed:
    """What the pipeline stores for one command: its role, the result, and whether it ends the turn."""

    role: str
    result: ToolResult
    terminal: bool
    awaiting_user: bool = False


def command_input(binding: CommandBinding, command: Command) -> dict[str, Any]:
    """Map the first-line text and the body onto the tool's input fields.

    Empty values are left out so the input model's own defaults and `required` rules
    decide what a missing argument means.
    """
    if binding.parse is not None:
        return binding.parse(command.args, command.body)
    raw: dict[str, Any] = {}
    if binding.args_field and command.args:
        raw[binding.args_field] = command.args
    if binding.body_field and command.body.strip():
        if binding.body_field != binding.args_field or (binding.body_fallback_to_args and not command.args):
            raw[binding.body_field] = command.body
    return raw


def refuse(command: Command, registry: ToolRegistry, failure: ToolFailure) -> Routed:
    """A command that is not run (its body was cut, its engine refuses it…): the failure's
    result under the tool's own role."""
    tool = registry.for_command(command.name)
    role, name = (tool.result_role, tool.name) if tool is not None else (ROUTER_ROLE, "router")
    message = failure.message if failure.message.endswith(".") else f"{failure.message}."
    return Routed(role, ToolResult.failure(name, failure.code, message, hint=failure.hint or FIX_HINT), False)


def route(command: Command, registry: ToolRegistry, ctx: ToolContext) -> Routed:
    tool = registry.for_command(command.name)
    if tool is None or tool.command is None:
        valid = ", ".join(f"/{t.command.name}" for t in registry.commands() if t.command)
        message = f"unknown command /{command.name}. Valid commands: {valid}."
        return Routed(
            ROUTER_ROLE, ToolResult.failure("router", ErrorCode.UNKNOWN_COMMAND, message, hint=FIX_HINT), False
        )
    try:
        raw_input = command_input(tool.command, command)
    except BindingError as error:
        message = f"invalid arguments for {tool.name}: {error}."
        failure = ToolResult.failure(tool.name, ErrorCode.VALIDATION_FAILED, message, hint=usage_hint(tool))
        return Routed(tool.result_role, failure, False)
    result = run_tool(tool, raw_input, ctx)
    return Routed(
        tool.result_role,
        result,
        terminal=tool.terminal_on_success and result.ok,
        awaiting_user=tool.interactive and result.ok,
    )
