"""The SSE event names are one contract (`foundation/events.py`): the web UI handles exactly those.

Read from the source of `static/js`: every dotted name the UI compares an event with must be one
the server sends (no stale name), and every name the server sends must be handled by the UI, or
be listed below with the reason it needs no handler of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

from foundation.events import PAYLOADS, TERMINAL_EVENTS, TEXT_EVENTS, EventName

ROOT = Path(__file__).resolve().parents[2]
COMPARED = re.compile(r"""(?:case\s+|===?\s*)"([a-z_]+\.[a-z_]+|done|error|heartbeat)\"""")

#: events the UI's code does not compare with, and why none is needed
NOT_COMPARED = {
    EventName.HEARTBEAT: "any event on a stream, a heartbeat too, tells live.js the connection lives (SILENCE_MS)",
}


def ui_event_names() -> set[str]:
    names: set[str] = set()
    for path in sorted((ROOT / "static" / "js").glob("*.js")):
        names.update(COMPARED.findall(path.read_text(encoding="utf-8")))
    return names


def test_the_ui_names_only_events_the_server_sends() -> None:
    assert ui_event_names() - {str(name) for name in EventName} == set()


def test_the_ui_handles_every_event_the_server_sends() -> None:
    unhandled = {str(name) for name in EventName} - ui_event_names() - set(NOT_COMPARED)
    assert unhandled == set()


def test_every_event_has_its_payload_declared_and_text_only_where_allowed() -> None:
    assert set(PAYLOADS) == set(EventName)
    assert TERMINAL_EVENTS <= TEXT_EVENTS
    assert {EventName.DONE, EventName.ERROR, EventName.ANSWER_DELTA} == TEXT_EVENTS
