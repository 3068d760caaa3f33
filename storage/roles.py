"""The message roles the backend itself gives (SPEC 4, 5, 8), named once.

A stored message's role is always set by the backend, never parsed from model text: `user` and
`assistant`, and `<x>_tools` for a tool result, where each tool declares its own (`Tool.result_role`).
The roles below are the ones no single tool owns: the user's questions and their answers
(`ui_tools`, SPEC 8), a command no tool answers (`router_tools`), and every MCP server's tool
(`mcp_tools`, SPEC 14). The SQL of `storage/messages.py` names `ui_tools` by this constant too.
"""

from __future__ import annotations

from typing import Final

USER: Final = "user"
ASSISTANT: Final = "assistant"
TOOLS_SUFFIX: Final = "_tools"  # every tool result's role ends so
UI_TOOLS: Final = "ui_tools"  # a question for the user (a widget, an approval) and its answer
ROUTER_TOOLS: Final = "router_tools"  # an unknown command's error (SPEC 5)
MCP_TOOLS: Final = "mcp_tools"  # an MCP server's tool (SPEC 14)
