"""Demonstrations: a few short exchanges that show the command protocol working (SPEC 6.2).

Rules alone got no command at all out of a small model; the same model used commands at once
when the context held a few exchanges in which the assistant's reply was only a command line.
They are generated from the turn's command list, like the list itself: one exchange per kind
of tool (its result role), from the tool's binding (`request`, the user's words, and
`example`, the command that answers them), then one plain answer so that the model also sees
that a question needing no tool gets text. They go to the provider between the system prompt
and the stored history, on a first pass only, and nowhere else: never stored, shown, streamed
or counted in `CONTEXT_MESSAGES`. The system prompt says they are examples (`DEMO_NOTE`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from providers import ChatMessage
from tools.base import Tool

MAX_COMMAND_DEMOS = 3  # a small model's context is short: three kinds of tool, each followed by a plain answer
# Plain exchanges, one after each command one, the last exchange always plain: a model that saw
# only commands before the real conversation wrote one for nearly every message (issue 33).
PLAIN_PAIRS = (
    ("How many days are there in a week?", "There are seven days in a week."),
    ("Can you tell me briefly what a verb is?", "A verb is a word for an action or a state, like 'run' or 'be'."),
    (
        "Thanks! In one sentence, what does 'concise' mean?",
        "'Concise' means saying what matters in few words, without leaving anything important out.",
    ),
)
PLAIN_REQUEST, PLAIN_ANSWER = PLAIN_PAIRS[-1]
DEMO_NOTE = (
    "The conversation starts with a few example exchanges that show how commands are written; "
    "they are not part of this conversation. The real conversation follows them."
)


def demonstrations(catalog: Sequence[Tool[Any, Any]]) -> list[ChatMessage]:
    """User/assistant pairs, a command reply and a plain answer in turn (up to
    `MAX_COMMAND_DEMOS` of each kind of tool), the last one plain. A command whose argument can
    be any sentence (`demonstrates=False`) is never shown: it is the shape a small model copies."""
    commands: list[tuple[str, str]] = []
    kinds: set[str] = set()
    for tool in catalog:
        binding = tool.command
        if binding is None or not binding.request or not binding.demonstrates:
            continue
        if tool.result_role in kinds or tool.interactive:
            continue
        kinds.add(tool.result_role)
        commands.append((binding.request, binding.example))
        if len(commands) >= MAX_COMMAND_DEMOS:
            break
    plain = PLAIN_PAIRS[len(PLAIN_PAIRS) - max(1, len(commands)) :]
    pairs = [pair for command, answer in zip(commands, plain, strict=False) for pair in (command, answer)]
    pairs = pairs or [plain[-1]]
    messages: list[ChatMessage] = []
    for request, reply in pairs:
        messages += [ChatMessage(role="user", content=request), ChatMessage(role="assistant", content=reply)]
    return messages
