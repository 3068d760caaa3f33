"""The first line decides, and only it is held back (SPEC 7a.2-3).

A `ReplyGate` sits between a provider stream and the event stream. It holds the reply
only while it cannot know whether the reply is a command:

- leading whitespace (and a BOM) is held (a reply of nothing but whitespace is retried,
  never shown);
- at the first other character: after a line break, or not a `/`, the reply is text and
  everything read so far is published as one `answer.delta`, every later piece at once;
- a reply that starts with `/` is held until its first line is complete, then the one
  detector (`commands.detect`) decides; a first line longer than `MAX_COMMAND_LINE` is text.

A command is never shown. For a command that takes no body, `feed` returns False as soon
as the first line is complete, so the provider closes the stream and the tool can start
(the rest is never generated); a command with a body, or any reply in the last allowed
pass (whose command lines are stripped, 6.6), is read to its end.

`begin` is called before every attempt (the pipeline's retry, each fallback provider): if
pieces of the previous attempt were shown, the client is told to drop them
(`answer.reset`), so a fallback never takes over a stream in the middle silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import Enum

from commands.detect import MAX_COMMAND_LINE, detect_command, first_line_and_rest

_LEADING_BLANK = re.compile(r"[\s\ufeff]*")  # whitespace and byte-order marks


class Decision(Enum):
    TEXT = "text"
    COMMAND = "command"


class ReplyGate:
    """A `providers.StreamSink` for one provider pass."""

    def __init__(
        self,
        publish: Callable[[str], None],
        reset: Callable[[], None],
        takes_body: Callable[[str], bool],
        *,
        read_all: bool = False,
    ) -> None:
        self._publish = publish
        self._reset = reset
        self._takes_body = takes_body
        self._read_all = read_all
        self._pieces: list[str] = []
        self._shown: list[str] = []
        self.decision: Decision | None = None
        self.command_name: str | None = None

    @property
    def shown(self) -> str:
        """The text published in this attempt (what a stopped turn keeps)."""
        return "".join(self._shown)

    def begin(self, provider: str, model: str) -> None:
        if self._shown:
            self._reset()
        self._pieces, self._shown = [], []
        self.decision, self.command_name = None, None

    def feed(self, piece: str) -> bool:
        if not piece:
            return True
        self._pieces.append(piece)
        if self.decision is Decision.TEXT:
            self._show(piece)
            return True
        if self.decision is Decision.COMMAND:
            return self._keep_reading()
        return self._decide()

    def finish(self) -> None:
        """The stream ended normally: decide what is still held (a one-line reply, say)."""
        if self.decision is not None:
            return
        text = "".join(self._pieces)
        if detect_command(text) is not None:
            self._command(text)
        elif text.strip():
            self.decision = Decision.TEXT
            self._show(text)

    def _decide(self) -> bool:
        text = "".join(self._pieces)
        leading = _LEADING_BLANK.match(text)
        assert leading is not None  # the pattern also matches the empty string
        lead = leading.group()
        rest = text[len(lead) :]
        if not rest:
            return True  # only whitespace so far
        if "\n" in lead or "\r" in lead or rest[0] != "/":
            return self._text(text)
        first, _ = first_line_and_rest(text)
        if len(first) == len(text):  # the first line is not complete yet
            return self._text(text) if len(text) > MAX_COMMAND_LINE else True
        if detect_command(first) is None:
            return self._text(text)
        self._command(first)
        return self._keep_reading()

    def _text(self, text: str) -> bool:
        self.decision = Decision.TEXT
        self._show(text)
        return True

    def _command(self, text: str) -> None:
        command = detect_command(text)
        assert command is not None
        self.decision = Decision.COMMAND
        self.command_name = command.name

    def _keep_reading(self) -> bool:
        return self._read_all or self._takes_body(self.command_name or "")

    def _show(self, text: str) -> None:
        self._shown.append(text)
        self._publish(text)
