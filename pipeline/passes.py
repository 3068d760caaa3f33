"""One provider pass, streamed through the first-line gate, with the one retry of 6.4.

The right chain is chosen by the caller (6.9). Each attempt is a `FallbackChain.stream`
fed to one `ReplyGate`; `provider.request` / `provider.response` events bracket each
attempt (sizes and timings, never text). A `None`, empty or whitespace-only reply gets
exactly one more attempt; a cancelled attempt ends the pass at once, with the text the
gate had shown. The provider feeds the gate through a `CappedSink` (`pipeline/reply_cap.py`),
so the reply a pass returns is bounded and valid Unicode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from foundation.cancellation import CancelToken
from foundation.events import EventName
from pipeline.reply_cap import CappedSink
from pipeline.reply_gate import ReplyGate
from pipeline.results import EventSink
from providers import ChatMessage, Completion, FailureKind, FallbackChain

ATTEMPTS = 2  # the first call and the one retry of 6.4


@dataclass(frozen=True)
class PassOutcome:
    completion: Completion
    gate: ReplyGate
    stopped: bool  # cancelled by the user
    text: str | None = None  # the reply as read: capped, valid Unicode (None: the call failed)
    cut: bool = False  # the reply went on past its cap (`pipeline/reply_cap.py`)

    @property
    def reply(self) -> str | None:
        """The reply text, or None when every attempt failed or was blank. For a plain
        answer it is exactly the text the gate published."""
        return self.text if self.text is not None and self.text.strip() else None


def provider_pass(
    chain: FallbackChain,
    context: Sequence[ChatMessage],
    emit: EventSink,
    cancel: CancelToken,
    takes_body: Callable[[str], bool],
    *,
    pass_index: int,
    last_pass: bool,
    grammar: str | None = None,
) -> PassOutcome:
    gate = ReplyGate(
        publish=lambda text: emit(EventName.ANSWER_DELTA, {"pass": pass_index, "text": text}),
        reset=lambda: emit(EventName.ANSWER_RESET, {"pass": pass_index}),
        takes_body=takes_body,
        read_all=last_pass,
    )
    sink = CappedSink(gate)
    completion: Completion | None = None
    for attempt in range(1, ATTEMPTS + 1):
        emit(EventName.PROVIDER_REQUEST, {"pass": pass_index, "attempt": attempt, "message_count": len(context)})
        completion = chain.stream(context, sink, cancel=cancel, grammar=grammar)
        text = None if completion.text is None else sink.text
        if text is not None:
            sink.finish()
        emit(
            EventName.PROVIDER_RESPONSE,
            {
                "pass": pass_index,
                "attempt": attempt,
                "provider": completion.provider,
                "ok": completion.text is not None,
                "failure": completion.failure,
                "elapsed_ms": completion.elapsed_ms,
                "first_text_ms": completion.first_text_ms,
                "request_bytes": completion.request_bytes,
                "response_bytes": completion.response_bytes,
                "stopped_early": completion.stopped_early,
            },
        )
        if completion.failure is FailureKind.CANCELLED or cancel.cancelled:
            return PassOutcome(completion, gate, stopped=True, text=text, cut=sink.cut)
        if text is not None and text.strip():
            return PassOutcome(completion, gate, stopped=False, text=text, cut=sink.cut)
    assert completion is not None
    return PassOutcome(completion, gate, stopped=False, text=text, cut=sink.cut)
