"""Timers that fit real models (SPEC 7a.1), over real HTTP to `FakeLLMServer` on loopback.

`LLM_TIMEOUT_S` is the deadline for the answer's first piece (connect and headers included),
`LLM_IDLE_TIMEOUT_S` the longest silence once it has started, and `LLM_MAX_TOKENS` bounds its
length on the wire; the circuit breaker counts only faults of the server. Assertions read how
a call ended, what the breaker counted and what the fake received or logged; wall time only
gets generous bounds.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from foundation.cancellation import CancelToken
from providers import BreakerPolicy, ChatMessage, FailureKind, FallbackChain, ProviderConfig, build_chain
from testing.fake_llm import KEEPALIVE, FakeLLMServer, StreamReply
from testing.llama_server import free_port
from testing.waiting import wait_until

MESSAGES = [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="hello there")]
WIRES = ["openai", "ollama"]
HANG_S = 30.0  # the fake drops a hung answer after this: far past every timer here
LONG = tuple(f"w{i} " for i in range(15))  # 15 pieces 0.1 s apart: three times a 0.5 s first-token deadline


@pytest.fixture
def fake() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(hang_s=HANG_S) as server:
        yield server


def chain_for(
    fake: FakeLLMServer,
    wire: str = "openai",
    *,
    timeout_s: float = 5.0,
    idle_timeout_s: float = 60.0,
    max_tokens: int = 4096,
    failures: int = 1,
    base_url: str | None = None,
) -> FallbackChain:
    """One provider with a circuit that opens at the first counted fault (`failures=1`), so
    that a single wrongly counted outcome shows."""
    base = base_url or (fake.ollama_base_url if wire == "ollama" else fake.openai_base_url)
    config = ProviderConfig(
        provider=wire,
        base_url=base,
        model="m-1",
        timeout_s=timeout_s,
        idle_timeout_s=idle_timeout_s,
        max_tokens=max_tokens,
    )
    return build_chain(config, breaker=BreakerPolicy(failures=failures, cooldown_s=60))


def breaker_of(chain: FallbackChain) -> tuple[str, int]:
    states = chain.breaker_states()
    assert states is not None
    return states[0].state, states[0].failures


# --- (a) a long answer is never cut by a timer, and never counts ---------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_an_answer_longer_than_the_first_token_deadline_is_delivered_whole(fake: FakeLLMServer, wire: str) -> None:
    chain = chain_for(fake, wire, timeout_s=0.5, idle_timeout_s=0.5)
    for _ in range(3):
        fake.queue(StreamReply(LONG, delay_s=0.1))
        started = time.monotonic()
        result = chain.call(MESSAGES)
        assert result.failure is None and result.text == "".join(LONG)
        assert time.monotonic() - started >= 1.0  # it did outlast the 0.5 s deadline
        assert breaker_of(chain) == ("closed", 0)
    assert len(fake.requests) == 3  # one call each: nothing was retried
    # the fake writes the stream's terminator after the last piece the client needed: wait for it
    wait_until(lambda: all(answer.completed for answer in fake.answers), "every answer written to its end")
    assert not any(answer.client_hung_up for answer in fake.answers)


# --- (b) a server that stops sending mid-answer ---------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_a_stream_that_stalls_after_its_first_piece_is_cut_by_the_idle_timer(fake: FakeLLMServer, wire: str) -> None:
    chain = chain_for(fake, wire, timeout_s=30.0, idle_timeout_s=0.5, failures=2)
    fake.queue(StreamReply(("Hel", "lo"), hang=True))
    result = chain.call(MESSAGES)
    assert result.failure is FailureKind.IDLE_TIMEOUT and result.text is None and result.status_code == 200
    assert result.first_text_ms is not None  # the answer had started
    assert result.elapsed_ms < 20_000  # the idle timer, not the 30 s deadline or the fake's drop
    answer = fake.answer()
    assert answer.pieces_sent == 2 and answer.client_hung_up and not answer.dropped
    assert breaker_of(chain) == ("closed", 1)  # the server stopped sending: a fault of the server


def test_pieces_that_keep_coming_reset_the_idle_timer(fake: FakeLLMServer) -> None:
    """Each gap (0.3 s) is under the idle timer (0.5 s) though the answer lasts far longer."""
    fake.queue(StreamReply(tuple(f"p{i} " for i in range(8)), delay_s=0.3))
    result = chain_for(fake, timeout_s=0.5, idle_timeout_s=0.5).call(MESSAGES)
    assert result.failure is None and result.text == "".join(f"p{i} " for i in range(8))


@pytest.mark.parametrize("wire", WIRES)
def test_a_pause_mid_answer_longer_than_the_first_token_deadline_is_not_cut(fake: FakeLLMServer, wire: str) -> None:
    """Once started, only `LLM_IDLE_TIMEOUT_S` applies: a 1 s pause passes a 0.3 s `LLM_TIMEOUT_S`."""
    fake.queue(StreamReply(("think", "ing done"), stall_after=1, stall_s=1.0))
    chain = chain_for(fake, wire, timeout_s=0.3, idle_timeout_s=5.0)
    result = chain.call(MESSAGES)
    assert result.failure is None and result.text == "thinking done"
    assert breaker_of(chain) == ("closed", 0)


def test_a_pause_longer_than_the_idle_timer_is_cut_though_the_server_would_go_on(fake: FakeLLMServer) -> None:
    fake.queue(StreamReply(("think", "ing done"), stall_after=1, stall_s=10.0))
    result = chain_for(fake, timeout_s=5.0, idle_timeout_s=0.5, failures=2).call(MESSAGES)
    assert result.failure is FailureKind.IDLE_TIMEOUT and result.elapsed_ms < 8_000
    answer = fake.answer()
    assert answer.pieces_sent == 1 and answer.client_hung_up and not answer.completed


# --- (c) no first token in time -------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_no_headers_within_the_deadline_is_a_first_token_timeout_and_counts(wire: str) -> None:
    with FakeLLMServer(delay_s=30) as slow:
        chain = chain_for(slow, wire, timeout_s=0.5)
        result = chain.call(MESSAGES)
        assert result.failure is FailureKind.TIMEOUT and "no first token within 0.5 s" in result.detail
        assert slow.answer().client_hung_up
        assert breaker_of(chain)[0] == "open"
        assert chain.call(MESSAGES).failure is FailureKind.CIRCUIT_OPEN and len(slow.requests) == 1


def test_bytes_without_a_piece_of_answer_do_not_start_it(fake: FakeLLMServer) -> None:
    """Keep-alive comments every 0.1 s keep the connection busy but are no first token."""
    fake.queue(StreamReply(raw=(KEEPALIVE,) * 100, delay_s=0.1))
    chain = chain_for(fake, timeout_s=0.5, idle_timeout_s=60.0)
    result = chain.call(MESSAGES)
    assert result.failure is FailureKind.TIMEOUT and result.first_text_ms is None
    answer = fake.answer()
    assert answer.client_hung_up and 0 < answer.pieces_sent < 100
    assert breaker_of(chain)[0] == "open"


# --- (d) what counts for the breaker --------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422, 429])
def test_a_4xx_or_a_rate_limit_never_opens_the_circuit(fake: FakeLLMServer, status: int) -> None:
    chain = chain_for(fake)
    for _ in range(3):
        fake.queue(status)
        result = chain.call(MESSAGES)
        assert result.failure is not None and result.status_code == status
    assert breaker_of(chain) == ("closed", 0) and len(fake.requests) == 3


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_5xx_counts(fake: FakeLLMServer, status: int) -> None:
    fake.queue(status)
    chain = chain_for(fake)
    assert chain.call(MESSAGES).failure is FailureKind.SERVER_ERROR
    assert breaker_of(chain)[0] == "open"


def test_a_refused_connection_counts(fake: FakeLLMServer) -> None:
    chain = chain_for(fake, base_url=f"http://127.0.0.1:{free_port()}/v1")
    assert chain.call(MESSAGES).failure is FailureKind.CONNECTION
    assert breaker_of(chain)[0] == "open"


def test_a_malformed_stream_counts(fake: FakeLLMServer) -> None:
    fake.queue(StreamReply(raw=(b"data: {not json\n\n",)))
    chain = chain_for(fake)
    assert chain.call(MESSAGES).failure is FailureKind.MALFORMED
    assert breaker_of(chain)[0] == "open"


# --- (e) LLM_MAX_TOKENS on the wire ---------------------------------------------------------------


def test_max_tokens_reaches_an_openai_compatible_server(fake: FakeLLMServer) -> None:
    assert chain_for(fake, "openai", max_tokens=321).complete(MESSAGES) == "ok"
    body = fake.requests[0]
    assert body["max_tokens"] == 321 and body["stream"] is True and "options" not in body


def test_num_predict_reaches_ollama(fake: FakeLLMServer) -> None:
    assert chain_for(fake, "ollama", max_tokens=321).complete(MESSAGES) == "ok"
    body = fake.requests[0]
    assert body["options"] == {"num_predict": 321} and "max_tokens" not in body


def test_fallbacks_inherit_the_timers_and_max_tokens() -> None:
    primary = ProviderConfig(provider="openai", model="m", timeout_s=7, idle_timeout_s=9, max_tokens=55)
    fallback = build_chain(primary, "ollama:small").providers[1]
    assert (fallback.config.timeout_s, fallback.config.idle_timeout_s, fallback.config.max_tokens) == (7, 9, 55)


# --- (f) cancel still stops at once, in any phase ----------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_cancel_in_the_middle_of_a_long_stream(fake: FakeLLMServer, wire: str) -> None:
    fake.queue(StreamReply(tuple(f"p{i} " for i in range(300)), delay_s=0.1))  # 30 s of answer
    chain = chain_for(fake, wire, timeout_s=0.5, idle_timeout_s=30.0)
    token = CancelToken()
    threading.Timer(0.8, token.cancel).start()  # past the first-token deadline, inside the answer
    result = chain.call(MESSAGES, cancel=token)
    assert result.failure is FailureKind.CANCELLED and result.elapsed_ms < 20_000
    answer = fake.answer()
    assert answer.client_hung_up and not answer.completed and 3 <= answer.pieces_sent < 300
    assert breaker_of(chain) == ("closed", 0)  # a cancel says nothing about the server


def test_cancel_during_a_stall_does_not_wait_for_the_idle_timer(fake: FakeLLMServer) -> None:
    fake.queue(StreamReply(("Hel",), hang=True))
    chain = chain_for(fake, timeout_s=0.5, idle_timeout_s=30.0)
    token = CancelToken()
    threading.Timer(0.8, token.cancel).start()
    result = chain.call(MESSAGES, cancel=token)
    assert result.failure is FailureKind.CANCELLED and result.elapsed_ms < 20_000
    assert fake.answer().client_hung_up and not fake.answer().dropped
    assert breaker_of(chain) == ("closed", 0)
