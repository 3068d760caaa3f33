"""One provider pass, streamed through the first-line gate, with the one retry of 6.4.

The right chain is chosen by the caller (6.9). Each attempt is a `FallbackChain.stream`
fed to one `ReplyGate`; `provider.request` / `provider.response` events bracket each
attempt (sizes and timings, never text). A `None`, empty or whitespace-only reply gets
exactly one more attempt; a cancelled attempt ends the pass at once, with the text the
gate had shown. The provider feeds the gate through a `CappedSink` (`pipeline/reply_cap.py`),
so the reply a pass returns is bounded and valid Unicode.

The turn's `TurnWait` (`LLM_WAIT_S`, `llm/wait.py`) bounds the wait for a first token over
every attempt and fallback: once it is used up, no retry is made. While an attempt has no
text yet, `provider.waiting` (`{"pass", "attempt", "provider", "model", "waited_s"}`) is
said every `WAITING_EVERY_S`, so the user sees how long and for which model it waits.
A failed pass reports its most telling failure: a call's, not a skip of an open circuit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from foundation.cancellation import CancelToken, Watchdog
from foundation.events import EventName
from pipeline.reply_cap import CappedSink
from pipeline.reply_gate import ReplyGate
from pipeline.results import EventSink
from providers import ChatMessage, Completion, FailureKind, FallbackChain, TurnWait

ATTEMPTS = 2  # the first call and the one retry of 6.4
WAITING_EVERY_S = 1.0  # a user watching "Waiting for the model, 12 s…" sees it count each second


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


class WaitingReporter:
    """The sink a chain feeds during one attempt: passes everything on to the pass's
    `CappedSink`, and says `provider.waiting` every `WAITING_EVERY_S` until the first piece
    of text (from the watchdog's thread: the attempt's thread is inside the call)."""

    def __init__(self, sink: CappedSink, emit: EventSink, watchdog: Watchdog, pass_index: int, attempt: int) -> None:
        self.sink = sink
        self.emit = emit
        self.watchdog = watchdog
        self.pass_index = pass_index
        self.attempt = attempt
        self._lock = threading.Lock()
        self._provider, self._model = "", ""
        self._started = time.monotonic()
        self._over = False
        self._unschedule: Callable[[], None] | None = None

    def begin(self, provider: str, model: str) -> None:
        with self._lock:
            self._provider, self._model = provider, model
        self.sink.begin(provider, model)

    def feed(self, piece: str) -> bool:
        if piece and not self._over:
            self.stop()  # the model is answering
        return self.sink.feed(piece)

    def start(self) -> None:
        with self._lock:
            self._started = time.monotonic()
            self._unschedule = self.watchdog.schedule(WAITING_EVERY_S, self._tick)

    def stop(self) -> None:
        with self._lock:
            self._over = True
            if self._unschedule is not None:
                self._unschedule()

    def _tick(self) -> None:
        # under the lock: once `stop` returned, no `provider.waiting` of this attempt can follow
        with self._lock:
            if self._over:
                return
            data = {
                "pass": self.pass_index,
                "attempt": self.attempt,
                "provider": self._provider,
                "model": self._model,
                "waited_s": int(time.monotonic() - self._started),  # whole seconds since the attempt began
            }
            self.emit(EventName.PROVIDER_WAITING, data)
            self._unschedule = self.watchdog.schedule(WAITING_EVERY_S, self._tick)


def telling(reported: Completion | None, latest: Completion) -> Completion:
    """The failure a pass reports: the latest, unless it is a skip (an open circuit) and an
    earlier attempt reached a provider (a stopped model is "cannot be reached", not a skip)."""
    if reported is not None and latest.failure is FailureKind.CIRCUIT_OPEN:
        return reported
    return latest


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
    wait: TurnWait | None = None,
    watchdog: Watchdog | None = None,
) -> PassOutcome:
    gate = ReplyGate(
        publish=lambda text: emit(EventName.ANSWER_DELTA, {"pass": pass_index, "text": text}),
        reset=lambda: emit(EventName.ANSWER_RESET, {"pass": pass_index}),
        takes_body=takes_body,
        read_all=last_pass,
    )
    sink = CappedSink(gate)
    completion: Completion | None = None
    reported: Completion | None = None
    text: str | None = None
    for attempt in range(1, ATTEMPTS + 1):
        if attempt > 1 and wait is not None and wait.exhausted():
            break  # the turn waited LLM_WAIT_S for a first token already: no retry
        emit(EventName.PROVIDER_REQUEST, {"pass": pass_index, "attempt": attempt, "message_count": len(context)})
        reporter = WaitingReporter(sink, emit, watchdog, pass_index, attempt) if watchdog is not None else None
        if reporter is not None:
            reporter.start()
        try:
            completion = chain.stream(context, reporter or sink, cancel=cancel, grammar=grammar, wait=wait)
        finally:
            if reporter is not None:
                reporter.stop()
        reported = telling(reported, completion)
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
    assert completion is not None and reported is not None
    return PassOutcome(
        reported if completion.text is None else completion, gate, stopped=False, text=text, cut=sink.cut
    )
