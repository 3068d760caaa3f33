"""The exchange policy every HTTP provider shares, whatever its wire format.

`HttpProvider` sends one streamed POST per call (through `llm/transport.py`: the first-token
deadline and the idle timer, cancel, bounded bodies), applies the 429 `Retry-After` policy, maps status codes to
`FailureKind`, reads a 2xx answer piece by piece as it arrives (or as one JSON body, from a
server that does not stream), and probes the server for `/health`. A subclass only knows its
wire format: the body it sends and where the text sits in a stream chunk and in a whole reply
(`llm/openai_wire.py`, `llm/ollama_wire.py`); the byte-level framing (SSE, NDJSON) is in
`llm/framing.py`.
"""

from __future__ import annotations

import json
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import requests

from foundation.cancellation import CancelToken, Watchdog
from llm.base import (
    Attempt,
    ChatMessage,
    FailureKind,
    Odds,
    ProbeResult,
    Provider,
    ProviderConfig,
    ReplyFeed,
    Sleep,
    TokenOdds,
    log,
    ms_since,
    text_or_failure,
)
from llm.framing import Framing
from llm.transport import Broken, Exchange, provider_session
from llm.wire import Parsed, decode_json, error_message

ERROR_BODY_MAX = 64 * 1024  # of a non-2xx answer: enough for any error message
REPLY_MAX = 4 * 1024 * 1024  # of one call's answers: far beyond any chat reply


def _retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` in seconds, or ``None`` when absent or not a number (HTTP-date form is
    treated as absent: we only wait for short, explicit delays)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _status_failure(status: int) -> FailureKind:
    if status in (401, 403):
        return FailureKind.AUTH
    if status == 429:
        return FailureKind.RATE_LIMITED
    if status >= 500:
        return FailureKind.SERVER_ERROR
    return FailureKind.CLIENT_ERROR


class HttpProvider(Provider):
    """Shared HTTP policy: a streamed POST under the call's timers, the 429 ``Retry-After``
    policy, and the mapping of transport and status errors to ``FailureKind``. Subclasses
    only know their wire format."""

    #: Content-Type values of a streamed answer; anything else is read as one JSON body.
    stream_types: ClassVar[tuple[str, ...]]
    probe_path: ClassVar[str] = "/models"
    #: A terminator without a finish reason means "cut short" (see `OpenAICompatibleProvider`).
    finish_reason_required: ClassVar[bool] = False

    def __init__(
        self,
        config: ProviderConfig,
        *,
        http: requests.Session | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        super().__init__(config, http=http, sleep=sleep)
        self.watchdog = Watchdog(f"{self.name}-deadlines")  # its thread starts on first use

    def _session(self) -> requests.Session:
        return provider_session(self.base_url)

    @abstractmethod
    def endpoint(self) -> str:
        """Full URL of the chat endpoint."""

    @abstractmethod
    def request_body(self, messages: Sequence[ChatMessage], grammar: str | None = None) -> dict[str, Any]:
        """The JSON body: model, messages and ``stream``, never tools/functions/tool_choice
        (a decoding ``grammar`` is not a tools field, SPEC 6.3)."""

    @abstractmethod
    def parse_reply(self, data: Any) -> Parsed:
        """Read a whole reply (a server that answered one JSON body)."""

    @abstractmethod
    def framing(self) -> Framing:
        """A fresh decoder for this format's stream."""

    @abstractmethod
    def parse_chunk(self, payload: str) -> Parsed:
        """Read one message of the stream (an SSE event's data, an NDJSON line)."""

    def probe(self, timeout_s: float = 2.0) -> ProbeResult:
        """A cheap authenticated GET (model list) that proves the server answers and the key works."""
        if self.needs_key and not self.config.api_key:
            return super().probe(timeout_s)
        started = time.perf_counter()
        try:
            response = self.http.get(f"{self.base_url}{self.probe_path}", headers=self.headers(), timeout=timeout_s)
        except requests.Timeout:
            return ProbeResult(ok=False, detail="timeout", elapsed_ms=ms_since(started))
        except requests.RequestException:
            return ProbeResult(ok=False, detail="connection failed", elapsed_ms=ms_since(started))
        status = response.status_code
        detail = "reachable" if status < 400 else f"HTTP {status} ({_status_failure(status).value})"
        return ProbeResult(ok=status < 400, detail=detail, elapsed_ms=ms_since(started))

    def odds_body(self, messages: Sequence[ChatMessage], grammar: str | None, tokens: int, top: int) -> dict[str, Any]:
        """The JSON body of a read of probabilities (`reads_odds` formats only)."""
        raise NotImplementedError(f"{self.name} cannot ask for log-probabilities")

    def parse_odds(self, data: Any) -> tuple[TokenOdds, ...] | None:
        """The tokens and their log-probabilities in a whole reply; None when it has none."""
        return None

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
        """One short, unstreamed call that asks for log-probabilities, under the call's deadline.

        What the server offers is learnt here: a reply without log-probabilities sets
        `offers.odds` False (a server that ignores the field); a refused request with a grammar
        is tried once without it and, when that passes, sets `offers.grammar` False; refused
        without one, `offers.odds` False (llama-cpp-python started without `logits_all`
        answers 500). A timeout or a dropped connection teaches nothing."""
        started = time.perf_counter()
        if not self.reads_odds or self.offers.odds is False:
            return super().read_odds(messages, tokens=tokens, top=top, grammar=grammar, cancel=cancel, wait_s=wait_s)
        if self.offers.grammar is False:
            grammar = None
        token = cancel if cancel is not None else CancelToken()
        allowed_s = self.config.timeout_s if wait_s is None else min(wait_s, self.config.timeout_s)
        deadline = time.monotonic() + allowed_s
        status, data = self._post_whole(self.odds_body(messages, grammar, tokens, top), token, deadline)
        if isinstance(data, Broken):
            return Odds(failure=data.kind, detail=data.detail, elapsed_ms=ms_since(started))
        if status >= 400 and grammar is not None:
            status, data = self._post_whole(self.odds_body(messages, None, tokens, top), token, deadline)
            if isinstance(data, Broken):
                return Odds(failure=data.kind, detail=data.detail, elapsed_ms=ms_since(started))
            if status < 400:
                self.offers.grammar = False
                log.info("provider takes no grammar: provider=%s model=%s", self.name, self.model)
        if status >= 400:
            self.offers.odds = False
            log.info("provider gives no log-probabilities: provider=%s model=%s HTTP %s", self.name, self.model, status)
            return Odds(failure=_status_failure(status), detail=f"HTTP {status}", elapsed_ms=ms_since(started))
        found = self.parse_odds(data)
        if not found:
            self.offers.odds = False
            log.info("provider gives no log-probabilities: provider=%s model=%s", self.name, self.model)
            return Odds(failure=FailureKind.MALFORMED, detail="no log-probabilities", elapsed_ms=ms_since(started))
        self.offers.odds = True
        if grammar is not None:
            self.offers.grammar = True
        return Odds(tokens=found, elapsed_ms=ms_since(started))

    def _post_whole(self, body: dict[str, Any], cancel: CancelToken, deadline: float) -> tuple[int, Any | Broken]:
        """POST `body` and read the whole (bounded) JSON answer by `deadline` (`time.monotonic()`):
        its status and decoded body."""
        exchange = Exchange(
            self.http,
            self.endpoint(),
            self.headers(),
            self.watchdog,
            cancel=cancel,
            deadline=deadline,
            timeout_s=self.config.timeout_s,
            idle_timeout_s=self.config.idle_timeout_s,
            max_bytes=ERROR_BODY_MAX * 16,
        )
        with exchange:
            response = exchange.post(json.dumps(body).encode("ascii"))
            if isinstance(response, Broken):
                return 0, response
            raw = exchange.read_body(response, None)
            if isinstance(raw, Broken):
                return response.status_code, raw
            return response.status_code, decode_json(raw)[0]

    def headers(self) -> dict[str, str]:
        accept = ", ".join((*self.stream_types, "application/json"))
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers

    def _attempt(self, messages: tuple[ChatMessage, ...], feed: ReplyFeed, grammar: str | None = None) -> Attempt:
        # Escaped to ASCII: any JSON parser reads it, whatever it assumes of the charset.
        payload = json.dumps(self.request_body(messages, grammar)).encode("ascii")
        exchange = Exchange(
            self.http,
            self.endpoint(),
            self.headers(),
            self.watchdog,
            cancel=feed.cancel,
            deadline=feed.deadline,
            timeout_s=self.config.timeout_s,
            idle_timeout_s=self.config.idle_timeout_s,
            max_bytes=REPLY_MAX,
        )
        with exchange:
            sent = 0
            retries = 0
            while True:
                sent += len(payload)
                response = exchange.post(payload)
                if isinstance(response, Broken):
                    return Attempt(
                        failure=response.kind,
                        detail=response.detail,
                        request_bytes=sent,
                        response_bytes=exchange.received,
                    )
                status = response.status_code
                if 200 <= status < 300:
                    # sent for good: an answer that streams (or a model that thinks) for minutes
                    # holds no copy of its prompt meanwhile (issue 38: a held turn's memory)
                    payload = b""
                    response.request.body = None
                    outcome = self._read_reply(exchange, response, feed)
                    return replace(outcome, status_code=status, request_bytes=sent, response_bytes=exchange.received)
                body = exchange.read_body(response, ERROR_BODY_MAX)
                sizes: dict[str, Any] = {
                    "status_code": status,
                    "request_bytes": sent,
                    "response_bytes": exchange.received,
                }
                if isinstance(body, Broken):
                    return Attempt(failure=body.kind, detail=body.detail, **sizes)
                delay = self._retry_delay(response, retries, feed)
                if delay is not None:
                    retries += 1
                    log.info(
                        "provider rate limited, retrying: provider=%s model=%s retry_after_s=%s retry=%d",
                        self.name,
                        self.model,
                        delay,
                        retries,
                    )
                    self._pause(delay, feed)
                    continue
                message = error_message(decode_json(body)[0]) or _redirect_message(response) or f"HTTP {status}"
                if status == 429 and retries:
                    message = f"{message} (after {retries} retries)"
                return Attempt(failure=_status_failure(status), detail=message, **sizes)

    def _retry_delay(self, response: requests.Response, retries: int, feed: ReplyFeed) -> float | None:
        """How long to wait before retrying a 429, or None to give up: only a short, explicit
        ``Retry-After``, a bounded number of times, and never past the first-token deadline."""
        if response.status_code != 429 or retries >= self.config.max_rate_limit_retries:
            return None
        delay = _retry_after_seconds(response.headers.get("Retry-After"))
        if delay is None or delay > self.config.max_retry_after_s or delay >= feed.remaining_s():
            return None
        return delay

    def _read_reply(self, exchange: Exchange, response: requests.Response, feed: ReplyFeed) -> Attempt:
        """A 2xx answer: a stream when its Content-Type says so, else one JSON body."""
        content_type = response.headers.get("Content-Type", "").lower()
        if any(kind in content_type for kind in self.stream_types):
            return self._read_stream(exchange, response, feed)
        body = exchange.read_body(response, None)
        if isinstance(body, Broken):
            return Attempt(failure=body.kind, detail=body.detail)
        data, decoded = decode_json(body)
        if not decoded:
            return Attempt(failure=FailureKind.MALFORMED, detail="response is not JSON")
        parsed = self.parse_reply(data)
        if parsed.failure is not None:
            return parsed.failure
        text = text_or_failure(parsed.content)
        if isinstance(text, Attempt):
            return text
        feed.put(text)  # one piece: this server does not stream
        return Attempt(finish_reason=parsed.finish_reason, usage=parsed.usage)

    def _read_stream(self, exchange: Exchange, response: requests.Response, feed: ReplyFeed) -> Attempt:
        """Hand the text on as it arrives, until the terminator, the end of the body, a
        failure, or a sink that says stop (then the stream is closed unread).

        The pieces of one read are handed on as one: they arrived together, so nobody could
        have seen them sooner, and one `answer.delta` (one write to a shared event log) is
        cheaper than several."""
        framing = self.framing()
        finish_reason: str | None = None
        usage: dict[str, int] | None = None
        while True:
            data = exchange.read(response)
            if isinstance(data, Broken):
                return Attempt(failure=data.kind, detail=data.detail)
            arrived: list[str] = []
            for payload in framing.feed(data) if data else framing.end():
                parsed = self.parse_chunk(payload)
                finish_reason = parsed.finish_reason or finish_reason
                usage = parsed.usage or usage
                failure = parsed.failure or _odd_content(parsed) or _stopped(exchange)
                if failure is not None:
                    feed.put("".join(arrived))
                    exchange.discard(response)
                    return replace(failure, finish_reason=finish_reason, usage=usage)
                if parsed.content:
                    exchange.answer_started()  # from now on only the server's silence is timed
                    arrived.append(parsed.content)
                if parsed.end:
                    if not feed.put("".join(arrived)):
                        exchange.discard(response)
                        return Attempt(finish_reason=finish_reason, usage=usage)
                    exchange.settle(response)
                    if finish_reason is None and self.finish_reason_required:
                        return Attempt(
                            failure=FailureKind.CONNECTION,
                            usage=usage,
                            detail="stream ended without a finish reason (cut short by the server)",
                        )
                    return Attempt(finish_reason=finish_reason, usage=usage)
            if not feed.put("".join(arrived)):
                exchange.discard(response)  # the sink has seen enough: hang up
                return Attempt(finish_reason=finish_reason, usage=usage)
            if not data:
                if finish_reason is None:
                    return Attempt(failure=FailureKind.CONNECTION, detail="stream ended early", usage=usage)
                return Attempt(finish_reason=finish_reason, usage=usage)


def _redirect_message(response: requests.Response) -> str | None:
    """A redirect is not followed (see `llm.transport.ProviderSession`): say where it points,
    so that the base URL can be set to that address."""
    location = response.headers.get("Location")
    if not 300 <= response.status_code < 400 or not location:
        return None
    return f"HTTP {response.status_code}: the server redirects to {location[:200]}; set the base URL to that address"


def _odd_content(parsed: Parsed) -> Attempt | None:
    """A stream chunk whose content is neither text nor absent."""
    if parsed.content is None or isinstance(parsed.content, str):
        return None
    kind = type(parsed.content).__name__
    return Attempt(failure=FailureKind.MALFORMED, detail=f"content is {kind}, not str")


def _stopped(exchange: Exchange) -> Attempt | None:
    """Cancelled or past the first-token deadline, checked before each piece (a read may bring many)."""
    stop = exchange.interrupted()
    return None if stop is None else Attempt(failure=stop.kind, detail=stop.detail)
