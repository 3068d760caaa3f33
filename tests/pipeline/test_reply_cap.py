"""How much of a reply a pass reads (`pipeline/reply_cap.py`), in front of the real `ReplyGate`.

Property: for any reply cut into pieces anywhere, the text read is at most the cap (plus the
note for a plain answer), the deltas the gate published are exactly that text when it is a
plain answer, `cut` says whether the reply went on past the cap, and a reply within every cap
is read whole.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.reply_cap import ANSWER_CUT_NOTE, MAX_ANSWER_CHARS, CappedSink, clip_answer, cut_note
from pipeline.reply_gate import Decision, ReplyGate

BODY_COMMANDS = {"write_file"}
HELD, ANSWER, REPLY = 600, 1_000, 2_000  # as in production: MAX_COMMAND_LINE < held < answer < reply


class Run:
    """One pass: a gate behind a small-capped sink, fed `pieces` until it says stop."""

    def __init__(self, pieces: list[str]) -> None:
        self.deltas: list[str] = []
        gate = ReplyGate(self.deltas.append, self.deltas.clear, lambda name: name in BODY_COMMANDS)
        self.sink = CappedSink(gate, held=HELD, answer=ANSWER, reply=REPLY)
        self.sink.begin("p", "m")
        self.stopped = False
        for piece in pieces:
            if not self.sink.feed(piece):
                self.stopped = True
                break
        self.sink.finish()

    @property
    def decision(self) -> Decision | None:
        return self.sink.gate.decision


def pieces_of(text: str, cuts: list[int]) -> list[str]:
    points = sorted({min(cut, len(text)) for cut in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:], strict=False)]


REPLIES = st.one_of(
    st.text(alphabet="ab \n<", max_size=1_500),
    st.builds(lambda n, tail: "/write_file f.txt\n" + "x" * n + tail, st.integers(0, 2_500), st.text("yz", max_size=5)),
    st.builds(lambda n: "/web_search " + "q" * n, st.integers(0, 700)),
    st.builds(lambda n, rest: " " * n + rest, st.integers(0, 1_500), st.text(alphabet="ab/\n", max_size=50)),
)


@given(REPLIES, st.lists(st.integers(0, 3_000), max_size=8))
def test_what_is_read_is_bounded_and_shown_exactly(reply: str, cuts: list[int]) -> None:
    run = Run(pieces_of(reply, cuts))
    text = run.sink.text
    if run.decision is Decision.TEXT:
        assert "".join(run.deltas) == text  # SPEC 7: the deltas are the stored answer
        if run.sink.cut:
            assert text == reply[:ANSWER] + cut_note(ANSWER)
        else:
            assert text == reply and len(reply) <= ANSWER
    elif run.decision is Decision.COMMAND:
        assert run.deltas == [] and len(text) <= REPLY
        assert run.sink.cut == (len(reply) > REPLY and reply.startswith("/write_file"))
        assert reply.startswith(text)
    else:
        assert len(text) <= HELD and reply.startswith(text) and not text.strip()


def test_a_plain_answer_past_the_cap_ends_with_the_note() -> None:
    run = Run(["a" * 700, "b" * 700])
    assert run.stopped and run.sink.cut
    assert run.sink.text == "a" * 700 + "b" * 300 + cut_note(ANSWER) == "".join(run.deltas)


def test_an_answer_exactly_at_the_cap_is_whole() -> None:
    run = Run(["a" * ANSWER])
    assert not run.stopped and not run.sink.cut and run.sink.text == "a" * ANSWER


def test_a_command_body_past_the_cap_is_cut_and_never_shown() -> None:
    run = Run(["/write_file a.txt\n", "x" * 5_000])
    assert run.stopped and run.sink.cut and run.decision is Decision.COMMAND
    assert len(run.sink.text) == REPLY and run.deltas == []


def test_endless_leading_whitespace_is_not_held_past_its_cap() -> None:
    run = Run([" "] * 5_000)
    assert run.stopped and run.sink.cut and run.sink.text == " " * HELD and run.deltas == []


def test_a_new_attempt_starts_from_nothing() -> None:
    run = Run(["a" * 1_400])
    assert run.sink.cut
    run.sink.begin("fallback", "m")
    assert run.sink.text == "" and not run.sink.cut and run.deltas == []  # the gate reset what it showed
    assert run.sink.feed("fresh") and run.sink.text == "fresh"


def test_pieces_are_made_valid_unicode() -> None:
    run = Run(["lone \ud800 and ", "pair \ud83d\ude00"])
    assert run.sink.text == "lone \ufffd and pair 😀" == "".join(run.deltas)


def test_clip_answer_uses_the_same_cap_and_note() -> None:
    assert clip_answer("short") == "short"
    long = "z" * (MAX_ANSWER_CHARS + 1)
    assert clip_answer(long) == "z" * MAX_ANSWER_CHARS + ANSWER_CUT_NOTE


def test_undecided_text_never_runs_past_the_answer_cap_whatever_the_limits() -> None:
    deltas: list[str] = []
    sink = CappedSink(ReplyGate(deltas.append, deltas.clear, lambda name: False), held=1_000, answer=300)
    sink.begin("p", "m")
    assert not sink.feed("a" * 400)
    assert "".join(deltas) == sink.text == "a" * 300 + cut_note(300)
