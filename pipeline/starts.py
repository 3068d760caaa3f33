"""How a turn starts: one typed value per way into `pipeline.turn.run_turn` (the one entry).

Every caller (`POST /chat`, a regenerate, an edit, a widget's or an approval's answer over the
web UI or `/v1`, the evaluation) builds one of these and hands it to the same function, under
its claim on the session (`live/desk.py`). The checks that decide whether a start is allowed
(the message is the chat's last, the question is still open…) are the caller's, made under
that claim; these values only say what the turn does first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage.messages import Message
from tools.base import ToolOutput


@dataclass(frozen=True)
class NewMessage:
    """A user message, stored first (SPEC 6.4: never lost), then answered."""

    text: str
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class Edit:
    """A new version of a user message (SPEC 17): stored under the edited one's parent (None:
    the chat's first message), so the old version stays in the tree."""

    text: str
    parent_id: int | None
    meta: dict[str, Any] | None = None


@dataclass(frozen=True)
class Retry:
    """Answer again the stored user message whose turn failed: the chat's last message (the
    caller checked), not stored a second time; its failure mark is dropped."""

    message: Message


@dataclass(frozen=True)
class Regenerate:
    """A new answer to a stored user message, as a new version (SPEC 17): the branch on screen
    is cut back to the message, which is not stored again."""

    message: Message


@dataclass(frozen=True)
class WidgetAnswer:
    """A widget's answer, already applied (profile written, the call marked answered, in one
    transaction: `pipeline/questions.py`): stored as the `ui_tools` result, then the next pass."""

    call: Message
    output: ToolOutput


@dataclass(frozen=True)
class ApprovalAnswer:
    """The user's yes or no to a command that asked first (SPEC 8, Approval), the call already
    marked answered: the command runs (or is declined), then the next pass."""

    call: Message
    approved: bool


TurnStart = NewMessage | Edit | Retry | Regenerate | WidgetAnswer | ApprovalAnswer
