"""What a stored tool message's `meta` holds: one frozen model, built here, read through here.

Every `<tool>_tools` message stores, next to its contract text, a JSON `meta`:

    command, command_line, tool, ok, duration_ms     every result
    output                                           a success: the tool's output model, dumped
    code, message                                    a failure: the error code, words for a person
    args, body, body_truncated                       the parsed command (a chat command only)
    kind, status, tool_call_id                       SPEC 8: a widget waiting for the user's answer
                                                     (`ui_pending`, `pending` then `answered`), or
                                                     the answer's result (`ui_result`)
    approval                                         SPEC 8, Approval: on the result of a command that
                                                     asked first, `approved` (it ran) or `declined`

`ToolMeta` is that shape. It is built by `tools.contract.stored_result` (the one builder),
written by `add_tool_message` (the storage boundary: only a `ToolMeta` goes in) and
validated by `ToolMeta.of(message)` where one is read. The stored JSON keeps exactly the keys that were set (`exclude_unset`):
the web UI and the clients read those keys, and rows written by older versions (fewer keys,
or keys this model does not name, kept as extras) still read and round-trip unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from storage.connection import DbConnection
from storage.messages import Message, add_message
from storage.roles import TOOLS_SUFFIX
from tools.interactive import WidgetOutput

if TYPE_CHECKING:
    pass

UI_PENDING: Final = "ui_pending"  # meta.kind of a widget waiting for the user's answer
UI_RESULT: Final = "ui_result"  # meta.kind of the stored answer

Kind = Literal["ui_pending", "ui_result"]
CallStatus = Literal["pending", "answered"]


class ToolMeta(BaseModel):
    """The `meta` of one stored tool message (see the module docstring for each key)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    command: str | None = None  # the command's name as the model wrote it (`ask_choice`)
    command_line: str | None = None  # the first line as run (`/ask_choice experience What…`)
    tool: str | None = None  # the tool that ran (a registry name)
    ok: bool | None = None
    duration_ms: int | float | None = None  # int where an older row stored one (kept as it is)
    output: dict[str, Any] | None = None  # a success's output; a widget (`WidgetOutput`) when interactive
    code: str | None = None  # a failure's error code
    message: str | None = None  # a failure's message for a person
    kind: Kind | None = None
    status: CallStatus | None = None  # a pending widget's call: `pending` until answered
    tool_call_id: str | None = None  # the `toolCallId` the client answers with
    approval: Literal["approved", "declined"] | None = None  # the result of a call that asked first
    args: str | None = None
    body: str | None = None
    body_truncated: bool | None = None

    @classmethod
    def of(cls, message: Message) -> ToolMeta:
        """The validated meta of a stored tool message (empty for a row stored without one)."""
        return cls.model_validate(message.meta or {})

    def stored(self) -> dict[str, Any]:
        """The JSON object written to the database: the keys that were set, nothing added."""
        return self.model_dump(mode="json", exclude_unset=True)

    def name(self, role: str) -> str:
        """The command's name, or the role's tool name for a row stored without one."""
        return self.command or role.removesuffix(TOOLS_SUFFIX)

    def widget(self) -> WidgetOutput | None:
        """The widget of an interactive call (its `output`), None for any other result."""
        if self.kind != UI_PENDING or self.output is None:
            return None
        return WidgetOutput.model_validate(self.output)

    def pending_widget(self) -> WidgetOutput | None:
        """The widget of a question still waiting for the user's answer (SPEC 8), else None."""
        return self.widget() if self.status == "pending" else None


def add_tool_message(
    conn: DbConnection, *, session_id: str, user_id: int, role: str, content: str, meta: ToolMeta
) -> Message:
    """The one writer of a tool message: its `meta` is a validated `ToolMeta`, stored as the
    keys that were set (`ToolMeta.of` is the one reader)."""
    if not role.endswith(TOOLS_SUFFIX):
        raise ValueError(f"{role!r} is not a tool message role")
    return add_message(conn, session_id=session_id, user_id=user_id, role=role, content=content, meta=meta.stored())
