"""How much of a model's reply one pass reads, shows and stores (SPEC 12).

An answer is stored once and replayed into every later context of its session, so a model
(or a web page steering it) must not be able to store megabytes with one reply. A
`CappedSink` sits between the provider stream and the `ReplyGate` and stops reading at a
limit that depends on what the gate has decided so far:

- `MAX_HELD_CHARS` while undecided: the gate holds only leading whitespace and the first
  line of a `/command` (at most `MAX_COMMAND_LINE`), so more than this is never a reply
  worth waiting for, and the gate's held text stays small;
- `MAX_ANSWER_CHARS` for a plain answer. 256 Ki characters is about 64 Ki tokens, more than
  the longest answer today's models write in one reply (their output limits are 4-64 Ki
  tokens), and a long answer legitimately written is kept whole; a longer one is cut there
  and ends with `ANSWER_CUT_NOTE`, fed through the gate like any text, so the deltas the
  user saw are still exactly the stored answer (SPEC 7). Forty such answers in a context
  (`CONTEXT_MESSAGES`) stay around 10 MiB;
- `MAX_REPLY_CHARS` for a command reply, whose body goes to a tool: above every tool's own
  body limit (a workspace file is at most 1 MB), so a body is either whole or `cut`, and the
  pipeline then refuses the command instead of running it on a truncated body.

Every piece is also made valid Unicode (`foundation.text_safety.replace_surrogates`): a provider's
JSON may spell a lone surrogate, which SQLite and files cannot store. A pair split across
two pieces becomes two replacement characters; servers send whole characters in practice.
"""

from __future__ import annotations

from foundation.text_safety import replace_surrogates
from pipeline.reply_gate import Decision, ReplyGate

MAX_HELD_CHARS = 8 * 1024
MAX_ANSWER_CHARS = 256 * 1024
MAX_REPLY_CHARS = 2 * 1024 * 1024


def cut_note(max_chars: int) -> str:
    return f"\n\n[answer truncated: it was longer than {max_chars:,} characters]"


ANSWER_CUT_NOTE = cut_note(MAX_ANSWER_CHARS)


def clip_answer(text: str) -> str:
    """An answer not streamed through a `CappedSink` (the last pass's text after its command
    lines), cut the same way."""
    return text if len(text) <= MAX_ANSWER_CHARS else text[:MAX_ANSWER_CHARS] + ANSWER_CUT_NOTE


class CappedSink:
    """A `providers.StreamSink` that feeds a `ReplyGate` at most the limits above (the
    keyword arguments, for tests of small limits).

    `text` is the reply as read (capped and repaired): for a plain answer it is exactly the
    gate's `shown` text. `cut` says the reply went on past the limit.
    """

    def __init__(
        self,
        gate: ReplyGate,
        *,
        held: int = MAX_HELD_CHARS,
        answer: int = MAX_ANSWER_CHARS,
        reply: int = MAX_REPLY_CHARS,
    ) -> None:
        self.gate = gate
        # Undecided text may turn out to be either, so it never runs past the smaller cap.
        self._limits = {None: min(held, answer, reply), Decision.TEXT: answer, Decision.COMMAND: reply}
        self._note = cut_note(answer)
        self._pieces: list[str] = []
        self._length = 0
        self.cut = False

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    def begin(self, provider: str, model: str) -> None:
        self._pieces, self._length, self.cut = [], 0, False
        self.gate.begin(provider, model)

    def feed(self, piece: str) -> bool:
        piece = replace_surrogates(piece)
        while piece:
            room = self._limit() - self._length
            if room <= 0:
                return self._overflow()
            part, piece = piece[:room], piece[room:]
            self._pieces.append(part)
            self._length += len(part)
            if not self.gate.feed(part):
                return False
        return True

    def finish(self) -> None:
        self.gate.finish()

    def _limit(self) -> int:
        return self._limits[self.gate.decision]

    def _overflow(self) -> bool:
        """Stop reading; a plain answer ends with the note, shown and stored alike."""
        self.cut = True
        if self.gate.decision is Decision.TEXT:
            self._pieces.append(self._note)
            self.gate.feed(self._note)
        return False
