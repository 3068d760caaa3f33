"""HTTP providers: Ollama's native chat API and every OpenAI-compatible server.

`HttpProvider` owns the transport (one JSON POST, the 429 `Retry-After` policy, the mapping
of transport and status errors to `FailureKind`, the probe); each subclass only knows its
wire format: the body it sends and where the reply sits in the answer.
"""

from __future__ import annotations

import json
import time
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import requests

from provider_base import (
    Attempt,
    ChatMessage,
    FailureKind,
    ProbeResult,
    Provider,
    log,
    ms_since,
    text_or_failure,
)


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



class HttpProvider(Provider):
    """Shared HTTP transport: one JSON POST, the 429 ``Retry-After`` policy, and the mapping of
    transport and status errors to ``FailureKind``. Subclasses only know their wire format."""

    @abstractmethod
    def endpoint(self) -> str:
        """Full URL of the chat endpoint."""

    @abstractmethod
    def request_body(self, messages: Sequence[ChatMessage]) -> dict[str, Any]:
        """The JSON body: model and messages only, never tools/functions/tool_choice."""

    @abstractmethod
    def parse_reply(self, data: Any) -> Any:
        """Pull the reply content out of a 200 body; return ``Attempt`` for shape errors."""

    probe_path: ClassVar[str] = "/models"

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
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers

    def _attempt(self, messages: tuple[ChatMessage, ...]) -> Attempt:
        payload = json.dumps(self.request_body(messages), ensure_ascii=False).encode("utf-8")
        sent = received = 0
        retries = 0
        while True:
            sent += len(payload)
            try:
                response = self.http.post(
                    self.endpoint(),
                    data=payload,
                    headers=self.headers(),
                    timeout=self.config.timeout_s,
                )
            except requests.Timeout as exc:  # before ConnectionError: ConnectTimeout is both
                return Attempt(None, FailureKind.TIMEOUT, type(exc).__name__, None,
                                sent, received)
            except requests.RequestException as exc:
                return Attempt(None, FailureKind.CONNECTION, type(exc).__name__, None,
                                sent, received)
            received += len(response.content)
            sizes = {"request_bytes": sent, "response_bytes": received}
            status = response.status_code
            if status == 429:
                delay = _retry_after_seconds(response.headers.get("Retry-After"))
                if (
                    delay is not None
                    and delay <= self.config.max_retry_after_s
                    and retries < self.config.max_rate_limit_retries
                ):
                    retries += 1
                    log.info(
                        "provider rate limited, retrying: provider=%s model=%s "
                        "retry_after_s=%s retry=%d",
                        self.name, self.model, delay, retries,
                    )
                    self.sleep(delay)
                    continue
            try:
                data: Any = json.loads(response.content)
            except ValueError:
                data = None
                decoded = False
            else:
                decoded = True
            if not 200 <= status < 300:
                message = _error_message(data) or f"HTTP {status}"
                if status == 429 and retries:
                    message = f"{message} (after {retries} retries)"
                return Attempt(None, _status_failure(status), message, status, **sizes)
            if not decoded:
                return Attempt(None, FailureKind.MALFORMED, "response is not JSON", status,
                                **sizes)
            parsed = self.parse_reply(data)
            if isinstance(parsed, Attempt):
                return Attempt(None, parsed.failure, parsed.detail, status, **sizes)
            return text_or_failure(parsed, status_code=status, **sizes)


def _upstream_error(data: dict[str, Any]) -> Attempt | None:
    """A 200 body that carries an ``error`` object (OpenRouter forwards upstream failures so)."""
    if data.get("error"):
        return Attempt(failure=FailureKind.UPSTREAM_ERROR,
                        detail=_error_message(data) or "error in 200 response")
    return None


class OllamaProvider(HttpProvider):
    """Ollama's native ``/api/chat`` (not its OpenAI shim) so that images use the native
    ``images`` field and error bodies are Ollama's ``{"error": "..."}``."""

    name = "ollama"
    needs_key = False
    default_base_url = "http://127.0.0.1:11434"
    default_model = "qwen2.5:7b"

    probe_path = "/api/tags"

    def endpoint(self) -> str:
        return f"{self.base_url}/api/chat"

    def request_body(self, messages: Sequence[ChatMessage]) -> dict[str, Any]:
        wire: list[dict[str, Any]] = []
        for message in messages:
            item: dict[str, Any] = {"role": message.role, "content": message.content}
            if message.images:
                item["images"] = [_strip_data_url(image) for image in message.images]
            wire.append(item)
        return {"model": self.model, "messages": wire, "stream": False}

    def parse_reply(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return Attempt(failure=FailureKind.MALFORMED, detail="body is not an object")
        upstream = _upstream_error(data)
        if upstream is not None:
            return upstream
        message = data.get("message")
        if not isinstance(message, dict):
            return Attempt(failure=FailureKind.MALFORMED, detail="no message object")
        return message.get("content")


def _strip_data_url(image: str) -> str:
    """Ollama wants raw base64; our messages carry data URLs."""
    if image.startswith("data:") and "," in image:
        return image.split(",", 1)[1]
    return image


class OpenAICompatibleProvider(HttpProvider):
    """Any server speaking OpenAI's ``/chat/completions`` (vLLM, llama.cpp, OpenAI itself).
    A key is optional because local servers often have none; hosted subclasses require one."""

    name = "openai"
    needs_key = False
    default_base_url = "https://api.openai.com/v1"
    default_model = "gpt-4o-mini"

    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def request_body(self, messages: Sequence[ChatMessage]) -> dict[str, Any]:
        wire: list[dict[str, Any]] = []
        for message in messages:
            content: str | list[dict[str, Any]] = message.content
            if message.images:
                content = [{"type": "text", "text": message.content}] + [
                    {"type": "image_url", "image_url": {"url": image}}
                    for image in message.images
                ]
            wire.append({"role": message.role, "content": content})
        return {"model": self.model, "messages": wire}

    def parse_reply(self, data: Any) -> Any:
        if not isinstance(data, dict):
            return Attempt(failure=FailureKind.MALFORMED, detail="body is not an object")
        upstream = _upstream_error(data)
        if upstream is not None:
            return upstream
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return Attempt(failure=FailureKind.MALFORMED, detail="no choices[0]")
        choice = choices[0]
        upstream = _upstream_error(choice)
        if upstream is not None:
            return upstream
        message = choice.get("message")
        if not isinstance(message, dict):
            return Attempt(failure=FailureKind.MALFORMED, detail="no choices[0].message")
        return message.get("content")


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


