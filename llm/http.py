"""HTTP providers: Ollama's native chat API and every OpenAI-compatible server.

`HttpProvider` owns the exchange policy: one streamed POST, the 429 `Retry-After` policy,
the mapping of status codes to `FailureKind`, the reading of a streamed reply piece by piece
(or of one JSON body, from a server that does not stream), and the probe. Each subclass only
knows its wire format: the body it sends and where the text sits in a stream chunk and in a
whole reply. The deadline and cancel machinery is in `llm/transport.py`; the byte-level
framing (SSE, NDJSON) in `llm/framing.py`.
"""

from __future__ import annotations

import json
import time
from abc import abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import requests

from foundation.cancellation import Watchdog
from llm.base import (
    Attempt,
    ChatMessage,
    FailureKind,
    ProbeResult,
    Provider,
    ProviderConfig,
    ReplyFeed,
    Sleep,
    log,
    ms_since,
    text_or_failure,
)
from llm.direct import DirectPost
from llm.framing import Framing, NdjsonDecoder, SseDecoder
from llm.transport import Broken, Exchange, PostTemplate, Reply, mount_abortable, prepare_post

ERROR_BODY_MAX = 64 * 1024  # of a non-2xx answer: enough for any error message
REPLY_MAX = 4 * 1024 * 1024  # of one call's answers: far beyond any chat reply


@dataclass(frozen=True)
class Parsed:
    """What one JSON message of the server says: a whole reply, or one chunk of a stream."""

    content: Any = None  # the text; anything but a str (or None) is classified as malformed
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    end: bool = False  # the stream's terminator ([DONE], "done": true)
    failure: Attempt | None = None


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


def _error_message(data: Any) -> str:
    """The human part of an error body: Ollama ``{"error": "..."}`` or OpenAI-style
    ``{"error": {"message": "...", "code": ...}}``."""
    if not isinstance(data, dict):
        return ""
    error = data.get("error")
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code")
        parts = [str(p) for p in (code, message) if p is not None and p != ""]
        return ": ".join(parts)
    return ""


def _status_failure(status: int) -> FailureKind:
    if status in (401, 403):
        return FailureKind.AUTH
    if status == 429:
        return FailureKind.RATE_LIMITED
    if status >= 500:
        return FailureKind.SERVER_ERROR
    return FailureKind.CLIENT_ERROR


def _json(raw: bytes | str) -> tuple[Any, bool]:
    """``(value, True)`` when ``raw`` is JSON, ``(None, False)`` otherwise (nested too deeply
    for the parser's recursion included: a reply is never that deep)."""
    try:
        return json.loads(raw), True
    except (ValueError, RecursionError):
        return None, False


def _malformed(detail: str) -> Parsed:
    return Parsed(failure=Attempt(failure=FailureKind.MALFORMED, detail=detail))


def _token_counts(**counts: Any) -> dict[str, int] | None:
    """Keep the integer counts; add the total when the server gave only its parts."""
    usage = {k: v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}
    if "total_tokens" not in usage and {"prompt_tokens", "completion_tokens"} <= set(usage):
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage or None


class HttpProvider(Provider):
    finish_reason_required: ClassVar[bool] = False  # a terminator without one means "cut short"

    """Shared HTTP policy: a streamed POST under one deadline, the 429 ``Retry-After``
    policy, and the mapping of transport and status errors to ``FailureKind``. Subclasses
    only know their wire format."""

    #: Content-Type values of a streamed answer; anything else is read as one JSON body.
    stream_types: ClassVar[tuple[str, ...]]
    probe_path: ClassVar[str] = "/models"

    def __init__(
        self,
        config: ProviderConfig,
        *,
        http: requests.Session | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        super().__init__(config, http=http, sleep=sleep)
        self.watchdog = Watchdog(f"{self.name}-deadlines")  # its thread starts on first use
        self._template: PostTemplate | DirectPost | None = None  # prepared on first use (see `_post`)

    def _session(self) -> requests.Session:
        """The base session, with connections that a deadline or a cancel can shut."""
        return mount_abortable(super()._session())

    def close(self) -> None:
        super().close()
        if self._template is not None:
            self._template.close()

    @abstractmethod
    def endpoint(self) -> str:
        """Full URL of the chat endpoint."""

    @abstractmethod
    def request_body(self, messages: Sequence[ChatMessage]) -> dict[str, Any]:
        """The JSON body: model, messages and ``stream``, never tools/functions/tool_choice."""

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

    def headers(self) -> dict[str, str]:
        accept = ", ".join((*self.stream_types, "application/json"))
        headers = {"Content-Type": "application/json", "Accept": accept}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers

    def _post(self) -> PostTemplate | DirectPost | Attempt:
        """The chat endpoint's prepared POST (built once: the URL and headers never change),
        or why it cannot be built (a base URL that is not a URL)."""
        if self._template is None:
            try:
                self._template = prepare_post(self.http, self.endpoint(), self.headers())
            except requests.exceptions.InvalidHeader:
                detail = "a request header (the API key) holds a character HTTP cannot carry, such as a line break"
                return Attempt(failure=FailureKind.NOT_CONFIGURED, detail=detail)
            except requests.RequestException as exc:
                detail = f"the base URL is not a usable URL ({type(exc).__name__})"
                return Attempt(failure=FailureKind.NOT_CONFIGURED, detail=detail)
        return self._template

    def _attempt(self, messages: tuple[ChatMessage, ...], feed: ReplyFeed) -> Attempt:
        template = self._post()
        if isinstance(template, Attempt):
            return template
        # Escaped to ASCII: the encoder's fast path, and any JSON parser reads it.
        payload = json.dumps(self.request_body(messages)).encode("ascii")
        exchange = Exchange(
            template,
            self.watchdog,
            cancel=feed.cancel,
            deadline=feed.deadline,
            timeout_s=self.config.timeout_s,
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
                message = _error_message(_json(body)[0]) or _redirect_message(response) or f"HTTP {status}"
                if status == 429 and retries:
                    message = f"{message} (after {retries} retries)"
                return Attempt(failure=_status_failure(status), detail=message, **sizes)

    def _retry_delay(self, response: Reply, retries: int, feed: ReplyFeed) -> float | None:
        """How long to wait before retrying a 429, or None to give up: only a short, explicit
        ``Retry-After``, a bounded number of times, and never past the call's deadline."""
        if response.status_code != 429 or retries >= self.config.max_rate_limit_retries:
            return None
        delay = _retry_after_seconds(response.headers.get("Retry-After"))
        if delay is None or delay > self.config.max_retry_after_s or delay >= feed.remaining_s():
            return None
        return delay

    def _read_reply(self, exchange: Exchange, response: Reply, feed: ReplyFeed) -> Attempt:
        """A 2xx answer: a stream when its Content-Type says so, else one JSON body."""
        content_type = response.headers.get("Content-Type", "").lower()
        if any(kind in content_type for kind in self.stream_types):
            return self._read_stream(exchange, response, feed)
        body = exchange.read_body(response, None)
        if isinstance(body, Broken):
            return Attempt(failure=body.kind, detail=body.detail)
        data, decoded = _json(body)
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

    def _read_stream(self, exchange: Exchange, response: Reply, feed: ReplyFeed) -> Attempt:
        """Hand the text on as it arrives, until the terminator, the end of the body, a
        failure, or a sink that says stop (then the stream is closed unread).

        The pieces of one read are handed on as one: they arrived together, so nobody could
        have seen them sooner, and a fast server's burst becomes one `answer.delta` instead of
        one event (and one round trip to a shared event log) per chunk."""
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


def _redirect_message(response: Reply) -> str | None:
    """A redirect is not followed (see `PostTemplate`): say where it points, so that the base
    URL can be set to that address."""
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
    """Cancelled or past the deadline, checked before each piece (a read may bring many)."""
    stop = exchange.interrupted()
    return None if stop is None else Attempt(failure=stop.kind, detail=stop.detail)


def _upstream_error(data: dict[str, Any]) -> Attempt | None:
    """A 200 body or stream chunk that carries an ``error`` object (OpenRouter forwards
    upstream failures so, also in the middle of a stream)."""
    if data.get("error"):
        return Attempt(failure=FailureKind.UPSTREAM_ERROR, detail=_error_message(data) or "error in 200 response")
    return None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class OllamaProvider(HttpProvider):
    """Ollama's native ``/api/chat`` (not its OpenAI shim) so that images use the native
    ``images`` field and error bodies are Ollama's ``{"error": "..."}``. Its stream is
    newline-delimited JSON: one object per piece, the last one with ``"done": true`` and the
    token counts."""

    name = "ollama"
    needs_key = False
    default_base_url = "http://127.0.0.1:11434"
    default_model = "qwen2.5:7b"

    probe_path = "/api/tags"
    stream_types = ("application/x-ndjson", "application/ndjson")

    def endpoint(self) -> str:
        return f"{self.base_url}/api/chat"

    def request_body(self, messages: Sequence[ChatMessage]) -> dict[str, Any]:
        wire: list[dict[str, Any]] = []
        for message in messages:
            item: dict[str, Any] = {"role": message.role, "content": message.content}
            if message.images:
                item["images"] = [_strip_data_url(image) for image in message.images]
            wire.append(item)
        return {"model": self.model, "messages": wire, "stream": True}

    def framing(self) -> Framing:
        return NdjsonDecoder()

    def parse_reply(self, data: Any) -> Parsed:
        if not isinstance(data, dict):
            return _malformed("body is not an object")
        upstream = _upstream_error(data)
        if upstream is not None:
            return Parsed(failure=upstream)
        message = data.get("message")
        if not isinstance(message, dict):
            return _malformed("no message object")
        return Parsed(
            content=message.get("content"), finish_reason=_string(data.get("done_reason")), usage=_ollama_usage(data)
        )

    def parse_chunk(self, payload: str) -> Parsed:
        data, decoded = _json(payload)
        if not decoded or not isinstance(data, dict):
            return _malformed("stream line is not a JSON object")
        upstream = _upstream_error(data)
        if upstream is not None:
            return Parsed(failure=upstream)
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if data.get("done") is not True:
            return Parsed(content=content)
        return Parsed(
            content=content, end=True, finish_reason=_string(data.get("done_reason")), usage=_ollama_usage(data)
        )


def _ollama_usage(data: dict[str, Any]) -> dict[str, int] | None:
    return _token_counts(prompt_tokens=data.get("prompt_eval_count"), completion_tokens=data.get("eval_count"))


def _strip_data_url(image: str) -> str:
    """Ollama wants raw base64; our messages carry data URLs."""
    if image.startswith("data:") and "," in image:
        return image.split(",", 1)[1]
    return image


class OpenAICompatibleProvider(HttpProvider):
    # Every OpenAI-compatible server sends a finish_reason before `[DONE]`; llama.cpp's server
    # sends a bare `[DONE]` when another request interrupts the stream, which must not pass
    # for a finished answer (the pipeline resets what was shown and retries).
    finish_reason_required = True

    """Any server speaking OpenAI's ``/chat/completions`` (vLLM, llama.cpp, OpenAI itself).
    A key is optional because local servers often have none; hosted subclasses require one.

    Its stream is server-sent events: ``choices[0].delta.content`` pieces, a chunk with a
    ``finish_reason``, ``usage`` where the server sends it (OpenRouter always does, in the
    last chunk), then ``data: [DONE]``. No ``stream_options`` are sent: not every
    compatible server accepts them."""

    name = "openai"
    needs_key = False
    default_base_url = "https://api.openai.com/v1"
    default_model = "gpt-4o-mini"

    stream_types = ("text/event-stream",)

    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def request_body(self, messages: Sequence[ChatMessage]) -> dict[str, Any]:
        wire: list[dict[str, Any]] = []
        for message in messages:
            content: str | list[dict[str, Any]] = message.content
            if message.images:
                content = [{"type": "text", "text": message.content}] + [
                    {"type": "image_url", "image_url": {"url": image}} for image in message.images
                ]
            wire.append({"role": message.role, "content": content})
        return {"model": self.model, "messages": wire, "stream": True}

    def framing(self) -> Framing:
        return SseDecoder()

    def parse_reply(self, data: Any) -> Parsed:
        if not isinstance(data, dict):
            return _malformed("body is not an object")
        upstream = _upstream_error(data)
        if upstream is not None:
            return Parsed(failure=upstream)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return _malformed("no choices[0]")
        choice = choices[0]
        upstream = _upstream_error(choice)
        if upstream is not None:
            return Parsed(failure=upstream)
        message = choice.get("message")
        if not isinstance(message, dict):
            return _malformed("no choices[0].message")
        return Parsed(
            content=message.get("content"),
            finish_reason=_string(choice.get("finish_reason")),
            usage=_openai_usage(data.get("usage")),
        )

    def parse_chunk(self, payload: str) -> Parsed:
        if payload.strip() == "[DONE]":
            return Parsed(end=True)
        data, decoded = _json(payload)
        if not decoded or not isinstance(data, dict):
            return _malformed("stream event is not a JSON object")
        upstream = _upstream_error(data)  # a mid-stream error: top-level `error`
        if upstream is not None:
            return Parsed(failure=upstream)
        usage = _openai_usage(data.get("usage"))
        choices = data.get("choices")
        if not choices:  # a usage-only chunk, or an empty keep-alive
            return Parsed(usage=usage)
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            return _malformed("no choices[0] in a stream chunk")
        choice = choices[0]
        upstream = _upstream_error(choice)
        if upstream is not None:
            return Parsed(failure=upstream)
        finish_reason = _string(choice.get("finish_reason"))
        if finish_reason == "error":
            return Parsed(
                failure=Attempt(failure=FailureKind.UPSTREAM_ERROR, detail="stream ended with finish_reason error")
            )
        delta = choice.get("delta")
        content = delta.get("content") if isinstance(delta, dict) else None
        return Parsed(content=content, finish_reason=finish_reason, usage=usage)


def _openai_usage(raw: Any) -> dict[str, int] | None:
    if not isinstance(raw, dict):
        return None
    return _token_counts(
        prompt_tokens=raw.get("prompt_tokens"),
        completion_tokens=raw.get("completion_tokens"),
        total_tokens=raw.get("total_tokens"),
    )


class OpenRouterProvider(OpenAICompatibleProvider):
    """OpenRouter: OpenAI wire format; upstream failures may arrive as 200 + ``error``."""

    name = "openrouter"
    needs_key = True
    default_base_url = "https://openrouter.ai/api/v1"
    default_model = "meta-llama/llama-3.3-70b-instruct"


class CerebrasProvider(OpenAICompatibleProvider):
    name = "cerebras"
    needs_key = True
    default_base_url = "https://api.cerebras.ai/v1"
    default_model = "llama-3.3-70b"


class ChutesProvider(OpenAICompatibleProvider):
    name = "chutes"
    needs_key = True
    default_base_url = "https://llm.chutes.ai/v1"
    default_model = "deepseek-ai/DeepSeek-V3-0324"
