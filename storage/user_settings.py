"""A user's own settings (SPEC 17) and the model a session starts with.

One row per user in `user_settings`; a user without a row has the defaults. The approval part
is only an addition to the operator's `TOOL_APPROVAL` (SPEC 8): commands the user wants to be
asked about, or every command. Nothing stored here can make a command run without asking
that the operator makes ask: there is no field for it. Every query is scoped by `user_id`.
"""

from __future__ import annotations

import json
import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from storage.connection import DbConnection
from storage.db import utc_now

log = logging.getLogger("storage.user_settings")

Theme = Literal["system", "light", "dark"]
MAX_PROMPT_CHARS = 4_000  # a personal addition: a few paragraphs of preferences, not a second persona
MAX_APPROVAL_COMMANDS = 500  # more than any registry holds (MCP tools included)


class UserApproval(BaseModel):
    """Commands that ask this user before they run, besides those the operator names."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    every_command: bool = Field(default=False, description="every command asks (the widgets never do)")
    commands: tuple[str, ...] = Field(default=(), max_length=MAX_APPROVAL_COMMANDS, description="command names")


class UserSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    theme: Theme = "system"
    system_prompt: str = Field(default="", max_length=MAX_PROMPT_CHARS)
    approval: UserApproval = UserApproval()


def _approval(text: str) -> UserApproval:
    try:
        return UserApproval.model_validate_json(text or "{}")
    except ValidationError:
        log.warning("unreadable approval settings ignored")  # the operator's policy still holds
        return UserApproval()


def get_user_settings(conn: DbConnection, user_id: int) -> UserSettings:
    row = conn.execute(
        "SELECT theme, system_prompt, approval FROM user_settings WHERE user_id = ?", (user_id,)
    ).fetchone()
    if row is None:
        return UserSettings()
    return UserSettings(theme=row["theme"], system_prompt=row["system_prompt"], approval=_approval(row["approval"]))


def save_user_settings(conn: DbConnection, user_id: int, settings: UserSettings) -> UserSettings:
    """Write all of the user's settings (one statement: two writers never mix halves)."""
    approval = json.dumps(settings.approval.model_dump(mode="json"))
    conn.execute(
        "INSERT INTO user_settings(user_id, theme, system_prompt, approval, updated_at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT(user_id) DO UPDATE SET theme = excluded.theme, system_prompt = excluded.system_prompt,"
        " approval = excluded.approval, updated_at = excluded.updated_at",
        (user_id, settings.theme, settings.system_prompt, approval, utc_now()),
    )
    return settings


def session_model(conn: DbConnection, user_id: int, session_id: str) -> str | None:
    """The chain entry (`provider:model`) the session's turns start with; None: the chain's order."""
    row = conn.execute("SELECT model FROM sessions WHERE id = ? AND user_id = ?", (session_id, user_id)).fetchone()
    return None if row is None else row["model"]


def set_session_model(conn: DbConnection, user_id: int, session_id: str, model: str | None) -> bool:
    """Choose (or, with None, forget) the session's model; False when the session is not the user's."""
    cursor = conn.execute("UPDATE sessions SET model = ? WHERE id = ? AND user_id = ?", (model, session_id, user_id))
    return cursor.rowcount > 0
