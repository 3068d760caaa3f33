"""`tools.contract.command_text`: the command's argument text and body kept in a tool
message's `meta` for the web UI's tool blocks (issue 12 part 6), bounded like the rest."""

from __future__ import annotations

import pytest

from tools.contract import MAX_BODY_CHARS, MAX_COMMAND_CHARS, command_text


@pytest.mark.parametrize(
    ("args", "body", "expected"),
    [
        ("SELECT 1", "", {"args": "SELECT 1"}),
        ("python", "print(1)\n", {"args": "python", "body": "print(1)\n", "body_truncated": False}),
        ("", "x" * MAX_BODY_CHARS, {"args": "", "body": "x" * MAX_BODY_CHARS, "body_truncated": False}),
        ("", "y" * (MAX_BODY_CHARS + 1), {"args": "", "body": "y" * MAX_BODY_CHARS, "body_truncated": True}),
        ("a" * (MAX_COMMAND_CHARS + 5), "", {"args": "a" * MAX_COMMAND_CHARS}),
        (
            "notes/\ud800.txt",
            "bad \udc00 half",
            {"args": "notes/\ufffd.txt", "body": "bad \ufffd half", "body_truncated": False},
        ),
    ],
)
def test_command_text_keeps_args_and_a_bounded_body(args: str, body: str, expected: dict[str, object]) -> None:
    assert command_text(args, body) == expected
