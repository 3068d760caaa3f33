"""A turn's total wait for a first token (`LLM_WAIT_S`, `llm/wait.py`) and the breaker's rule
that one turn's faults count once (`llm/breaker.py`), on providers whose outcome is fixed."""

from __future__ import annotations

from typing import Any

import pytest

from llm.breaker import CircuitBreaker
from llm.hints import USER_WORDS, reason_of
from providers import (
    BreakerPolicy,
    BreakerState,
    ChatMessage,
    Completion,
    FailureKind,
    FallbackChain,
    Provider,
    ProviderConfig,
    TurnWait,
)

MESSAGES = [ChatMessage(role="user", content="hi")]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Fixed(Provider):
    """A provider that ends every call the same way after `waited_ms`, and notes each deadline."""

    name = "fixed"
    needs_key = False
    default_base_url = ""
    default_model = "m"

    def __init__(self, kind: FailureKind | None, waited_ms: float = 0.0, timeout_s: float = 120.0) -> None:
        super().__init__(ProviderConfig(provider="fixed", timeout_s=timeout_s))
        self.kind, self.waited_ms = kind, waited_ms
        self.deadlines: list[float | None] = []

    def stream(
        self, messages: Any, sink: Any = None, *, cancel: Any = None, grammar: Any = None, deadline: Any = None
    ) -> Completion:
        self.deadlines.append(deadline)
        text = None if self.kind is not None else "answer"
        first = None if text is None else 10.0
        return Completion(
            text=text,
            provider=self.name,
            model=self.model,
            failure=self.kind,
            elapsed_ms=self.waited_ms,
            first_text_ms=first,
        )

    def _attempt(self, messages: Any, feed: Any, grammar: Any = None) -> Any:  # pragma: no cover
        raise AssertionError("answers in stream()")


def done(waited_ms: float, first_text_ms: float | None = None) -> Completion:
    return Completion(text=None, provider="p", model="m", elapsed_ms=waited_ms, first_text_ms=first_text_ms)


# --- the wait ------------------------------------------------------------------------------------------


def test_each_call_waits_at_most_what_the_turn_has_left() -> None:
    clock = Clock()
    wait = TurnWait(10.0, clock)
    assert wait.deadline(4.0) == 1004.0  # its own deadline is sooner
    wait.spend(done(8000))  # a call that waited 8 s for nothing
    assert wait.remaining_s() == pytest.approx(2.0)
    assert wait.deadline(4.0) == pytest.approx(1002.0)  # what is left is sooner
    wait.spend(done(60_000, first_text_ms=1000))  # an answer that streamed for a minute waited 1 s
    assert wait.remaining_s() == pytest.approx(1.0) and not wait.exhausted()
    wait.spend(done(1000))
    assert wait.exhausted() and wait.deadline(4.0) == clock.now


def test_the_chain_makes_no_call_once_the_wait_is_used_up() -> None:
    clock = Clock()
    hung, spare = Fixed(FailureKind.TIMEOUT, waited_ms=5000), Fixed(None)
    chain = FallbackChain([hung, spare])
    wait = TurnWait(5.0, clock)
    result = chain.stream(MESSAGES, wait=wait)
    assert result.failure is FailureKind.TIMEOUT  # the hung one's own failure, not a made-up one
    assert (len(hung.deadlines), len(spare.deadlines)) == (1, 0)  # no fallback after the whole wait
    assert hung.deadlines == [1005.0]


def test_the_fallback_gets_what_is_left() -> None:
    clock = Clock()
    hung, spare = Fixed(FailureKind.TIMEOUT, waited_ms=3000), Fixed(None)
    chain = FallbackChain([hung, spare])
    assert chain.stream(MESSAGES, wait=TurnWait(5.0, clock)).text == "answer"
    assert spare.deadlines == [pytest.approx(1002.0)]


def test_without_a_wait_every_provider_is_called_with_its_own_deadline() -> None:
    hung, spare = Fixed(FailureKind.TIMEOUT, waited_ms=500_000), Fixed(None)
    assert FallbackChain([hung, spare]).stream(MESSAGES).text == "answer"
    assert hung.deadlines == [None] and spare.deadlines == [None]


# --- the breaker counts turns, not calls ------------------------------------------------------------------


def test_one_turns_retries_count_once() -> None:
    breaker = CircuitBreaker(BreakerPolicy(failures=2, cooldown_s=10), Clock())
    turn = object()
    for _ in range(4):  # a 500, its retry, and the fallbacks' calls of the same server
        breaker.record(FailureKind.SERVER_ERROR, turn)
    assert breaker.snapshot().state == "closed" and breaker.snapshot().failures == 1 and breaker.admit()
    breaker.record(FailureKind.TIMEOUT, object())  # another turn
    assert breaker.snapshot().state == "open" and breaker.last_fault is FailureKind.TIMEOUT


def test_a_turns_retry_after_another_turns_fault_is_not_counted_again() -> None:
    breaker = CircuitBreaker(BreakerPolicy(failures=3, cooldown_s=10), Clock())
    alice, bob = object(), object()
    for turn in (alice, bob, alice, bob):  # two users' turns at once, each with its retry
        breaker.record(FailureKind.SERVER_ERROR, turn)
    assert breaker.snapshot() == BreakerState("closed", 2, None)
    breaker.record(FailureKind.SERVER_ERROR, object())  # a third turn
    assert breaker.snapshot().state == "open"


def test_a_success_between_two_turns_ends_the_run() -> None:
    breaker = CircuitBreaker(BreakerPolicy(failures=2, cooldown_s=10), Clock())
    breaker.record(FailureKind.CONNECTION, object())
    breaker.record(None, object())
    breaker.record(FailureKind.CONNECTION, object())
    assert breaker.snapshot().state == "closed" and breaker.snapshot().failures == 1


def test_the_chain_counts_one_failing_turn_once_for_every_other_user() -> None:
    failing = Fixed(FailureKind.SERVER_ERROR)
    chain = FallbackChain([failing], BreakerPolicy(failures=2, cooldown_s=60))
    wait = TurnWait(60.0)
    for _ in range(2):  # the first call and the one retry of SPEC 6.4, as `pipeline/passes.py` makes them
        chain.stream(MESSAGES, wait=wait)
    states = chain.breaker_states()
    assert states is not None and (states[0].state, states[0].failures) == ("closed", 1)
    failing.kind = None  # the next user's turn is called, and answered
    assert chain.stream(MESSAGES, wait=TurnWait(60.0)).text == "answer"


def test_a_skipped_provider_says_what_opened_its_circuit() -> None:
    refused = Fixed(FailureKind.CONNECTION)
    chain = FallbackChain([refused], BreakerPolicy(failures=1, cooldown_s=60))
    assert chain.stream(MESSAGES, wait=TurnWait(60.0)).failure is FailureKind.CONNECTION
    skipped = chain.stream(MESSAGES, wait=TurnWait(60.0))
    assert (skipped.failure, skipped.cause) == (FailureKind.CIRCUIT_OPEN, FailureKind.CONNECTION)
    assert reason_of(skipped.failure, cause=skipped.cause) == "unreachable"  # not "circuit open"


# --- what the user reads ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failure", "status", "reason"),
    [
        (FailureKind.TIMEOUT, None, "not_answering"),
        (FailureKind.IDLE_TIMEOUT, 200, "not_answering"),
        (FailureKind.CONNECTION, None, "unreachable"),
        (FailureKind.CONNECTION, 200, "not_answering"),  # cut in the middle of an answer
        (FailureKind.SERVER_ERROR, 500, "overloaded"),
        (FailureKind.RATE_LIMITED, 429, "overloaded"),
        (FailureKind.CLIENT_ERROR, 400, "refused"),
        (FailureKind.AUTH, 401, "refused"),
        (FailureKind.CIRCUIT_OPEN, None, "not_answering"),
    ],
)
def test_every_failure_has_a_users_reason(failure: FailureKind, status: int | None, reason: str) -> None:
    assert reason_of(failure, status_code=status) == reason


def test_the_users_words_name_no_operator_detail() -> None:
    for words in USER_WORDS.values():
        assert "LLM_" not in words and "make" not in words and "http" not in words and "/" not in words
        assert "kept" in words
