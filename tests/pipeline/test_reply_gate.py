"""The first line decides, and only it is held back (SPEC 7a.2-3): `pipeline/reply_gate.py`.

Property: for any reply cut into pieces anywhere (inside a BOM's neighbourhood, inside
`\\r\\n`, right after the first `/`), the gate shows exactly the reply when it is text,
nothing when it is a command, agrees with the one detector, and stops reading a body-less
command at the end of its first line.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from commands.detect import MAX_COMMAND_LINE, detect_command
from pipeline.reply_gate import Decision, ReplyGate

BODY_COMMANDS = {"write_file", "run_code", "memory_sql"}

REPLIES = [
    "Hello there, how can I help?",
    "/web_search mars rover\n",
    "/web_search mars rover",
    "\ufeff/weather Paris\r\nand more text the model kept writing",
    "  \t/weather Paris\r\n",
    "\n/weather Paris",  # blank first line: text
    "\r\n/weather Paris",
    "   \n\n  Indented text",
    "/write_file notes.txt\n```\nhello\n```\n",
    "/run_code python\r\nprint(1)\r\n",
    "/ not a command\nmore",
    "/123 nope",
    "/path/to/file is where it lives",
    "List<String> and a<b and b>c",
    "```\n/web_search inside a fence\n```",
    "/" + "a" * (MAX_COMMAND_LINE + 10) + "\nrest",
    "/web_search " + "x" * (MAX_COMMAND_LINE + 5),
    "Text first\n/web_search later",
    "\u00a0/web_search nbsp first",
    "/WEATHER Paris\n",
    "/unknown_cmd with args\nbody ignored",
]


class Recorder:
    def __init__(self) -> None:
        self.deltas: list[str] = []
        self.resets = 0

    def gate(self, *, read_all: bool = False) -> ReplyGate:
        return ReplyGate(self.deltas.append, self.reset, lambda name: name in BODY_COMMANDS, read_all=read_all)

    def reset(self) -> None:
        self.resets += 1
        self.deltas.clear()


def feed_all(gate: ReplyGate, pieces: list[str]) -> tuple[str, bool]:
    """Feed until the gate says stop; returns (text read, stopped early)."""
    gate.begin("p", "m")
    read = ""
    for piece in pieces:
        read += piece
        if not gate.feed(piece):
            return read, True
    gate.finish()
    return read, False


def cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False) if b > a]


@settings(max_examples=400, deadline=None)
@given(
    reply=st.sampled_from(REPLIES) | st.text(alphabet=" \t\r\n\ufeff/abcX_<>`", max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_any_cut_shows_exactly_the_text_or_nothing(reply: str, cuts: list[int]) -> None:
    recorder = Recorder()
    gate = recorder.gate()
    read, stopped = feed_all(gate, cut(reply, cuts))
    command = detect_command(reply)
    shown = "".join(recorder.deltas)
    if stopped:
        assert command is not None and command.name not in BODY_COMMANDS
        assert detect_command(read) is not None and detect_command(read).name == command.name  # type: ignore[union-attr]
        assert shown == ""
    elif command is not None:
        assert gate.decision is Decision.COMMAND and gate.command_name == command.name
        assert shown == "" and read == reply
    elif reply.strip():
        assert gate.decision is Decision.TEXT
        assert shown == reply == gate.shown
    else:
        assert gate.decision is None and shown == ""  # whitespace only: retried, never shown


@pytest.mark.parametrize("reply", [r for r in REPLIES if detect_command(r) is None])
def test_text_is_published_as_soon_as_it_is_known(reply: str) -> None:
    """Piece by piece: once a non-space character that is not a command start is read, every
    piece is shown in the same call that fed it (nothing waits for the end)."""
    recorder = Recorder()
    gate = recorder.gate()
    gate.begin("p", "m")
    for index, char in enumerate(reply):
        gate.feed(char)
        so_far = reply[: index + 1]
        stripped = so_far.lstrip()
        lead = so_far[: len(so_far) - len(stripped)]
        if stripped and ("\n" in lead or "\r" in lead or not stripped.startswith("/")):
            assert "".join(recorder.deltas) == so_far


def test_body_less_command_stops_at_the_line_break() -> None:
    recorder = Recorder()
    gate = recorder.gate()
    gate.begin("p", "m")
    assert gate.feed("/weather Pa") is True
    assert gate.feed("ris\r") is False  # \r alone ends the first line
    assert recorder.deltas == [] and gate.command_name == "weather"


def test_command_with_body_reads_on() -> None:
    gate = Recorder().gate()
    gate.begin("p", "m")
    assert gate.feed("/run_code python\n") is True
    assert gate.feed("print(1)\n") is True


def test_last_pass_reads_every_command_to_its_end() -> None:
    gate = Recorder().gate(read_all=True)
    gate.begin("p", "m")
    assert gate.feed("/weather Paris\n") is True


def test_long_first_line_starting_with_slash_becomes_text_at_the_limit() -> None:
    recorder = Recorder()
    gate = recorder.gate()
    gate.begin("p", "m")
    gate.feed("/" + "a" * (MAX_COMMAND_LINE - 1))
    assert recorder.deltas == []
    gate.feed("bb")
    assert "".join(recorder.deltas) == "/" + "a" * (MAX_COMMAND_LINE - 1) + "bb"


def test_a_new_attempt_resets_what_was_shown() -> None:
    recorder = Recorder()
    gate = recorder.gate()
    gate.begin("a", "m")
    gate.feed("Partial answ")
    gate.begin("b", "m")  # the provider failed; a fallback or the retry starts
    assert recorder.resets == 1 and recorder.deltas == []
    gate.feed("Full answer")
    gate.finish()
    assert "".join(recorder.deltas) == "Full answer" == gate.shown


def test_no_reset_when_nothing_was_shown() -> None:
    recorder = Recorder()
    gate = recorder.gate()
    gate.begin("a", "m")
    gate.feed("   ")
    gate.begin("b", "m")
    assert recorder.resets == 0
