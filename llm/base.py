"""Provider building blocks: the message and result types, the config, and the base class.

A provider turns a list of `ChatMessage` (roles system/user/assistant only) into one
`Completion` whose `text` is a `str` or `None`. The reply streams: `Provider.stream` hands
each piece of text to a `StreamSink` as it arrives, so the pipeline can show an answer while
it is written and close the stream as soon as it has seen enough. Runtime failures never
raise: they are classified into a `FailureKind` and logged without prompt text. The
concrete providers live in `llm/openai_wire.py`, `llm/ollama_wire.py` (both on
`llm/http.py`) and `llm/scripted.py`; `providers.py` is the public face.
"""

from __future__ import annotations

import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Literal, Protocol

import requests
from pydantic import BaseModel, ConfigDict

from foundation.cancellation import CancelToken

log = logging.getLogger("providers")

Sleep = Callable[[float], None]

DETAIL_MAX = 200


class ChatMessage(BaseModel):
    """One message sent to a provider. Frozen so a context can be shared between calls."""

    model_config = ConfigDict(frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str
    images: tuple[str, ...] = ()  # data URLs "data:image/png;base64,...."


class FailureKind(str, Enum):
    """Why a call produced no text; the pipeline and the fallback chain act on it."""

    TIMEOUT = "timeout"  # no first piece of the answer within LLM_TIMEOUT_S (connect and headers included)
    IDLE_TIMEOUT = "idle_timeout"  # the answer had started, then nothing arrived for LLM_IDLE_TIMEOUT_S
    AUTH = "auth"
    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    CLIENT_ERROR = "client_error"
    CONNECTION = "connection"
    MALFORMED = "malformed"
    UPSTREAM_ERROR = "upstream_error"
    EMPTY = "empty"
    SCRIPT_EXHAUSTED = "script_exhausted"
    NOT_CONFIGURED = "not_configured"
    CANCELLED = "cancelled"  # the caller cancelled (the user pressed Stop): not the provider's fault
    CIRCUIT_OPEN = "circuit_open"  # not called: it kept failing, and fails fast for a while (llm/breaker.py)


class StreamSink(Protocol):
    """Where a streamed reply goes while it is being read (the pipeline's reply gate)."""

    def begin(self, provider: str, model: str) -> None:
        """A new attempt starts (called before each provider of a chain, the first one too):
        text fed before this call belongs to an attempt that failed."""

    def feed(self, piece: str) -> bool:
        """The next piece of reply text; return False to stop reading now (the provider closes
        the stream and the call succeeds with ``stopped_early``)."""


class Completion(BaseModel):
    """The outcome of one provider call: text or a classified failure, plus sizes and timing
    (what SSE ``provider.response`` events report; never the text itself)."""

    model_config = ConfigDict(frozen=True)

    text: str | None
    provider: str
    model: str
    failure: FailureKind | None = None
    detail: str = ""  # short, human-readable, never prompt text
    status_code: int | None = None
    elapsed_ms: float
    request_bytes: int = 0
    response_bytes: int = 0
    stopped_early: bool = False  # the sink stopped the stream; ``text`` is what was read until then
    first_text_ms: float | None = None  # from the call's start to the first non-empty piece
    usage: dict[str, int] | None = None  # prompt_tokens / completion_tokens / total_tokens, when given
    finish_reason: str | None = None  # as the server said ("stop", "length"...), when it said
    cause: FailureKind | None = None  # CIRCUIT_OPEN: the server fault that opened the circuit

    @property
    def ok(self) -> bool:
        """True when the call produced text."""
        return self.text is not None


class ProbeResult(BaseModel):
    """Is the provider reachable right now? What `/health` reports (no prompt is sent)."""

    model_config = ConfigDict(frozen=True)
    ok: bool
    detail: str
    elapsed_ms: float = 0.0


class ProviderConfig(BaseModel):
    """Everything needed to build one provider; ``None`` fields take the class defaults."""

    model_config = ConfigDict(frozen=True)

    provider: str
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    timeout_s: float = 120.0  # until the first piece of the answer (LLM_TIMEOUT_S)
    idle_timeout_s: float = 60.0  # the longest silence once the answer has started (LLM_IDLE_TIMEOUT_S)
    max_tokens: int = 4096  # the answer's length, sent as `max_tokens` / `num_predict` (LLM_MAX_TOKENS)
    temperature: float | None = None  # sent only when set (LLM_TEMPERATURE)
    seed: int | None = None  # sent only when set (LLM_SEED)
    max_retry_after_s: float = 10.0
    max_rate_limit_retries: int = 2
    scripted_replies: str | None = None

    def sampling(self) -> dict[str, float | int]:
        """`temperature` and `seed` as set; an unset one is not sent (the server's default holds)."""
        chosen = {"temperature": self.temperature, "seed": self.seed}
        return {key: value for key, value in chosen.items() if value is not None}


class ProviderError(Exception):
    """Developer-facing configuration error (unknown provider name, unreadable script file...)."""


@dataclass(frozen=True)
class Attempt:
    """What a concrete provider reports back to ``Provider.stream``: how it ended. The text
    itself went through the ``ReplyFeed`` piece by piece."""

    failure: FailureKind | None = None
    detail: str = ""
    status_code: int | None = None
    request_bytes: int = 0
    response_bytes: int = 0
    finish_reason: str | None = None
    usage: dict[str, int] | None = None


@dataclass(frozen=True)
class TokenOdds:
    """One token a server generated, its log-probability, and the alternatives it listed."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()  # (token, log-probability), most likely first


@dataclass(frozen=True)
class Odds:
    """A read of the model's probabilities on a context (SPEC 6.11): the tokens it generated
    with their log-probabilities, or why there are none. Never shown or stored: the pipeline
    only decides with it."""

    tokens: tuple[TokenOdds, ...] = ()
    failure: FailureKind | None = None
    detail: str = ""
    elapsed_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None and bool(self.tokens)


@dataclass
class Offers:
    """What a provider was found to offer beyond text, learnt from its answers (never assumed):
    None until a call told. Written by the provider's own calls only."""

    odds: bool | None = None  # returns log-probabilities
    grammar: bool | None = None  # takes a GBNF `grammar` field


def text_or_failure(content: Any) -> str | Attempt:
    """Apply the one rule every provider shares to a whole reply: a non-blank ``str``, or the
    classified failure."""
    if content is None:
        return Attempt(failure=FailureKind.EMPTY, detail="content is null or missing")
    if not isinstance(content, str):
        kind = type(content).__name__
        return Attempt(failure=FailureKind.MALFORMED, detail=f"content is {kind}, not str")
    if not content.strip():
        return Attempt(failure=FailureKind.EMPTY, detail="content is blank")
    return content


class ReplyFeed:
    """One call's reply as it arrives: what a concrete provider puts each piece into.

    Built by ``Provider.stream``, so that every provider shares one policy: pieces go to the
    caller's sink, their concatenation is the ``text`` of a success, the first one is timed,
    and a sink that says "stop" is remembered. It also carries the call's cancel token and
    first-token deadline, so that a provider between two pieces asks one object whether to
    go on. The deadline ends where the answer starts: once a piece is in, no timer of the
    feed's cuts it (the silence between pieces is the transport's business, `llm/transport.py`).
    """

    def __init__(self, sink: StreamSink | None, cancel: CancelToken, *, started: float, deadline: float) -> None:
        self.sink = sink
        self.cancel = cancel
        self.deadline = deadline  # time.monotonic() value by which the first piece must arrive
        self._started = started  # time.perf_counter() value
        self._pieces: list[str] = []
        self.stopped = False
        self.first_text_ms: float | None = None

    def put(self, piece: str) -> bool:
        """Deliver one piece; False when the sink asked to stop (read nothing more)."""
        if self.stopped:
            return False
        if not piece:
            return True
        if self.first_text_ms is None:
            self.first_text_ms = ms_since(self._started)
        self._pieces.append(piece)
        if self.sink is not None and not self.sink.feed(piece):
            self.stopped = True
            return False
        return True

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    @property
    def started(self) -> bool:
        """The answer has started: its first piece was delivered."""
        return self.first_text_ms is not None

    def remaining_s(self) -> float:
        """Time left before the first-token deadline (what a wait before the answer may use)."""
        return self.deadline - time.monotonic()

    def interruption(self) -> FailureKind | None:
        """CANCELLED, or TIMEOUT while no piece has arrived by the deadline, else None."""
        if self.cancel.cancelled:
            return FailureKind.CANCELLED
        if not self.started and time.monotonic() >= self.deadline:
            return FailureKind.TIMEOUT
        return None


def scrub_detail(detail: str, messages: Sequence[ChatMessage]) -> str:
    """Keep details short and free of prompt text: upstream error bodies sometimes echo the
    input, and details end up in logs and SSE events."""
    if not detail:  # a success: nothing to scan the prompt for
        return detail
    for message in messages:
        content = message.content.strip()
        if len(content) >= 4 and content in detail:
            detail = detail.replace(content, "[redacted]")
    return detail[:DETAIL_MAX]


class Provider(ABC):
    """One LLM backend. Subclasses implement ``_attempt``; ``stream`` adds the shared policy
    (key check, deadline, timing, the blank-reply rule, logging) so that no subclass can
    forget it."""

    name: ClassVar[str]
    needs_key: ClassVar[bool]
    default_base_url: ClassVar[str]
    default_model: ClassVar[str]
    # Whether the server takes a decoding grammar (GBNF, `LLM_GRAMMAR`); the others never get one.
    accepts_grammar: ClassVar[bool] = False
    # Whether its wire format can ask for log-probabilities (`read_odds`); a server may still not give them.
    reads_odds: ClassVar[bool] = False
    # A hosted API that bills every request: `LLM_DECIDE=auto` makes no extra reads on it.
    billed_per_call: ClassVar[bool] = False

    def __init__(
        self,
        config: ProviderConfig,
        *,
        http: requests.Session | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        self.config = config
        self.http = http if http is not None else self._session()
        self.sleep = sleep  # None: wait on the call's cancel token, so Stop ends a wait too
        self.offers = (
            Offers(odds=False) if not self.reads_odds else Offers(grammar=None if self.accepts_grammar else False)
        )

    def _session(self) -> requests.Session:
        """A pooled session whose proxy settings are read from the environment once.

        With `trust_env` on, requests re-scans `os.environ` for proxies on every call; the
        answer cannot change while the process runs, so it is resolved here, once.
        """
        session = requests.Session()
        configure_session(session, self.base_url)
        return session

    @property
    def model(self) -> str:
        return self.config.model or self.default_model

    @property
    def base_url(self) -> str:
        return (self.config.base_url or self.default_base_url).rstrip("/")

    def stream(
        self,
        messages: Sequence[ChatMessage],
        sink: StreamSink | None = None,
        *,
        cancel: CancelToken | None = None,
        grammar: str | None = None,
        deadline: float | None = None,
    ) -> Completion:
        """Run one completion, handing each piece of the reply to ``sink`` as it arrives.

        Never raises for runtime failures: returns ``text=None`` with a ``FailureKind`` (also
        when pieces were fed before the failure) and logs the outcome once, without any
        message text. ``config.timeout_s`` bounds the wait for the first piece (connect and
        headers included), ``config.idle_timeout_s`` the silence between pieces after it; an
        answer that keeps coming is never cut by a timer. ``cancel`` stops it at once.
        ``grammar`` (GBNF) constrains the reply where the server takes one (``accepts_grammar``)
        and is left out elsewhere. ``deadline`` (a ``time.monotonic()`` value) brings the
        first-token deadline forward: what is left of the turn's wait (``llm/wait.py``).
        """
        started = time.perf_counter()
        token = cancel if cancel is not None else CancelToken()
        first_token_by = time.monotonic() + self.config.timeout_s
        if deadline is not None:
            first_token_by = min(first_token_by, deadline)
        feed = ReplyFeed(sink, token, started=started, deadline=first_token_by)
        if self.needs_key and not self.config.api_key:
            attempt = Attempt(failure=FailureKind.NOT_CONFIGURED, detail="no API key configured")
        elif token.cancelled:
            attempt = Attempt(failure=FailureKind.CANCELLED, detail="cancelled before the call")
        else:
            attempt = self._attempt(tuple(messages), feed, grammar if self.accepts_grammar else None)
        failure, detail = attempt.failure, attempt.detail
        if failure is None and not feed.stopped and not feed.text.strip():
            failure = FailureKind.EMPTY
            detail = "content is blank" if feed.text else "no content in the reply"
        completion = Completion(
            text=feed.text if failure is None else None,
            provider=self.name,
            model=self.model,
            failure=failure,
            detail=scrub_detail(detail, messages),
            status_code=attempt.status_code,
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
            request_bytes=attempt.request_bytes,
            response_bytes=attempt.response_bytes,
            stopped_early=feed.stopped and failure is None,
            first_text_ms=feed.first_text_ms,
            usage=attempt.usage,
            finish_reason=attempt.finish_reason,
        )
        _log_outcome(completion)
        return completion

    def call(
        self, messages: Sequence[ChatMessage], *, cancel: CancelToken | None = None, grammar: str | None = None
    ) -> Completion:
        """The whole reply at once: ``stream`` without a sink."""
        return self.stream(messages, None, cancel=cancel, grammar=grammar)

    def complete(self, messages: Sequence[ChatMessage]) -> str | None:
        """The pipeline's view of a provider: text or ``None``."""
        return self.call(messages).text

    def read_odds(
        self,
        messages: Sequence[ChatMessage],
        *,
        tokens: int,
        top: int,
        grammar: str | None = None,
        cancel: CancelToken | None = None,
        wait_s: float | None = None,
    ) -> Odds:
        """Generate at most `tokens` tokens (held to `grammar` where the server takes one) and
        return each with its log-probability and its `top` alternatives; not streamed, never
        shown, within `wait_s` (or `LLM_TIMEOUT_S`, the sooner). A provider that cannot answers
        a failure (`offers.odds` says whether to ask)."""
        return Odds(failure=FailureKind.NOT_CONFIGURED, detail=f"{self.name} returns no log-probabilities")

    def close(self) -> None:
        """Close the idle connections to the server (calls in flight keep theirs)."""
        self.http.close()

    def probe(self, timeout_s: float = 2.0) -> ProbeResult:
        """Whether the provider can answer; HTTP providers override this with a real request."""
        if self.needs_key and not self.config.api_key:
            return ProbeResult(ok=False, detail="no API key configured")
        return ProbeResult(ok=True, detail="ready")

    def _pause(self, seconds: float, feed: ReplyFeed) -> None:
        """Wait (a ``Retry-After``), ending early when the call is cancelled."""
        if self.sleep is not None:
            self.sleep(seconds)
        else:
            feed.cancel.wait(seconds)

    @abstractmethod
    def _attempt(self, messages: tuple[ChatMessage, ...], feed: ReplyFeed, grammar: str | None = None) -> Attempt:
        """Put the reply for ``messages`` into ``feed`` piece by piece and say how it ended;
        stop when ``feed.put`` returns False or ``feed.interruption()`` says so."""


def configure_session(session: requests.Session, base_url: str) -> None:
    """Resolve proxies and the CA bundle once, then stop requests from re-reading the
    environment on every call (see ``Provider._session``)."""
    if base_url:
        session.proxies.update(requests.utils.get_environ_proxies(base_url))
    # With `trust_env` off, requests no longer reads the CA bundle variables itself.
    session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
    session.trust_env = False


def _log_outcome(completion: Completion) -> None:
    """One line per call: a warning for a failure, info for a cancel, debug for a success."""
    if completion.failure is FailureKind.CANCELLED:
        log.info(
            "provider call cancelled: provider=%s model=%s elapsed_ms=%.1f",
            completion.provider,
            completion.model,
            completion.elapsed_ms,
        )
    elif completion.failure is not None:
        log.warning(
            "provider call failed: provider=%s model=%s kind=%s status=%s elapsed_ms=%.1f detail=%s",
            completion.provider,
            completion.model,
            completion.failure.value,
            completion.status_code,
            completion.elapsed_ms,
            completion.detail,
        )
    else:
        log.debug(
            "provider call ok: provider=%s model=%s elapsed_ms=%.1f first_text_ms=%s "
            "bytes_out=%d bytes_in=%d stopped_early=%s",
            completion.provider,
            completion.model,
            completion.elapsed_ms,
            completion.first_text_ms,
            completion.request_bytes,
            completion.response_bytes,
            completion.stopped_early,
        )


def ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
