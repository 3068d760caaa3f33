"""`tools/meta.py`: the one model of a tool message's `meta`, written and read at the storage boundary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from storage.db import Database
from storage.messages import add_message, recent_messages
from storage.sessions import create_session
from storage.users import create_user
from tools.base import ErrorCode, ToolResult
from tools.contract import command_text, stored_result
from tools.meta import UI_PENDING, UI_RESULT, ToolMeta, add_tool_message

WIDGET = {"widget": "choice", "target_field": "experience", "question": "How much?", "options": ["none", "a lot"]}


@pytest.fixture
def room(tmp_path: Path) -> Iterator[tuple[Database, int, str]]:
    database = Database(str(tmp_path / "meta.db"))
    database.migrate()
    with database.connection() as conn:
        user, _ = create_user(conn, "alice")
        session = create_session(conn, user.id, "s")
    yield database, user.id, session.id


@pytest.mark.parametrize(
    ("result", "keys"),
    [
        (
            ToolResult(tool="weather", ok=True, output={"t": 1}, text="1"),
            {"command", "command_line", "tool", "ok", "duration_ms", "output"},
        ),
        (
            ToolResult.failure("weather", ErrorCode.TIMEOUT, "slow"),
            {"command", "command_line", "tool", "ok", "duration_ms", "code", "message"},
        ),
    ],
)
def test_stored_result_keeps_exactly_the_keys_it_sets(result: ToolResult, keys: set[str]) -> None:
    assert set(stored_result("weather_tools", "weather", "/weather Oslo", result).meta) == keys


def test_a_pending_widget_and_its_command_text_are_typed_fields() -> None:
    result = ToolResult(tool="ask_choice", ok=True, output=WIDGET, text="asked")
    stored = stored_result(
        "ui_tools",
        "ask_choice",
        "/ask_choice experience How much?",
        result,
        kind=UI_PENDING,
        status="pending",
        tool_call_id="call_1",
        **command_text("x", "- a\n- b"),
    )
    meta = stored.tool_meta
    assert (meta.kind, meta.status, meta.tool_call_id, meta.args, meta.body) == (
        UI_PENDING,
        "pending",
        "call_1",
        "x",
        "- a\n- b",
    )
    widget = meta.pending_widget()
    assert widget is not None and widget.options == ["none", "a lot"] and widget.target_field == "experience"
    assert ToolMeta.model_validate({**meta.stored(), "status": "answered"}).pending_widget() is None


def test_a_row_written_by_an_older_version_reads_and_round_trips_unchanged(room: tuple[Database, int, str]) -> None:
    database, user_id, session_id = room
    old = {"command": "weather", "tool": "weather", "ok": True, "duration_ms": 12, "output": {"t": 1}, "legacy": [1]}
    with database.connection() as conn:
        add_message(conn, session_id=session_id, user_id=user_id, role="weather_tools", content="x", meta=old)
        add_message(conn, session_id=session_id, user_id=user_id, role="weather_tools", content="y")
        first, second = recent_messages(conn, session_id, 2)
    meta = ToolMeta.of(first)
    assert meta.command_line is None and meta.name("weather_tools") == "weather"
    assert meta.stored() == old and isinstance(meta.stored()["duration_ms"], int)
    assert ToolMeta.of(second).stored() == {} and ToolMeta.of(second).name("open_url_tools") == "open_url"


def test_the_writer_stores_the_validated_meta_and_refuses_other_roles(room: tuple[Database, int, str]) -> None:
    database, user_id, session_id = room
    meta = ToolMeta(command="confirm", tool="confirm", ok=True, kind=UI_RESULT, tool_call_id="call_2")
    with database.connection() as conn:
        written = add_tool_message(
            conn, session_id=session_id, user_id=user_id, role="ui_tools", content="c", meta=meta
        )
        with pytest.raises(ValueError, match="not a tool message role"):
            add_tool_message(conn, session_id=session_id, user_id=user_id, role="assistant", content="c", meta=meta)
        (read,) = recent_messages(conn, session_id, 1)
    assert read.id == written.id and read.meta == {
        "command": "confirm",
        "tool": "confirm",
        "ok": True,
        "kind": UI_RESULT,
        "tool_call_id": "call_2",
    }
    assert ToolMeta.of(read) == meta


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValidationError):
        ToolMeta.model_validate({"kind": "something_else"})
