"""Provider building blocks: the message and result types, the config, and the base class.

A provider turns a list of `ChatMessage` (roles system/user/assistant only) into one
`Completion` whose `text` is a `str` or `None`. Runtime failures never raise: they are
classified into a `FailureKind` and logged without prompt text. The concrete providers live
in `provider_http.py` and `provider_scripted.py`; `providers.py` is the public face.
"""

from __future__ import annotations

import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar, Literal

import requests
from pydantic import BaseModel, ConfigDict

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

    TIMEOUT = "timeout"
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
    timeout_s: float = 120.0
    max_retry_after_s: float = 10.0
    max_rate_limit_retries: int = 2
    scripted_replies: str | None = None


class ProviderError(Exception):
    """Developer-facing configuration error (unknown provider name, unreadable script file...)."""


@dataclass(frozen=True)
class Attempt:
    """What a concrete provider reports back to ``Provider.call``, before timing is added."""

    text: str | None = None
    failure: FailureKind | None = None
    detail: str = ""
    status_code: int | None = None
    request_bytes: int = 0
    response_bytes: int = 0


def text_or_failure(content: Any, **extra: Any) -> Attempt:
    """Apply the one rule every provider shares: a non-blank ``str`` or a classified failure."""
    if content is None:
        return Attempt(failure=FailureKind.EMPTY, detail="content is null or missing", **extra)
    if not isinstance(content, str):
        kind = type(content).__name__
        return Attempt(failure=FailureKind.MALFORMED, detail=f"content is {kind}, not str", **extra)
    if not content.strip():
        return Attempt(failure=FailureKind.EMPTY, detail="content is blank", **extra)
    return Attempt(text=content, **extra)


def scrub_detail(detail: str, messages: Sequence[ChatMessage]) -> str:
    """Keep details short and free of prompt text: upstream error bodies sometimes echo the
    input, and details end up in logs and SSE events."""
    for message in messages:
        content = message.content.strip()
        if len(content) >= 4 and content in detail:
            detail = detail.replace(content, "[redacted]")
    return detail[:DETAIL_MAX]


class Provider(ABC):
    """One LLM backend. Subclasses implement ``_attempt``; ``call`` adds the shared policy
    (key check, timing, logging) so that no subclass can forget it."""

    name: ClassVar[str]
    needs_key: ClassVar[bool]
    default_base_url: ClassVar[str]
    default_model: ClassVar[str]

    def __init__(
        self,
        config: ProviderConfig,
        *,
        http: requests.Session | None = None,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.config = config
        self.http = http if http is not None else self._session()
        self.sleep = sleep

    def _session(self) -> requests.Session:
        """A pooled session whose proxy settings are read from the environment once.

        With `trust_env` on, requests re-scans `os.environ` for proxies on every call,
        which costs a noticeable share of a loopback round trip; the answer cannot change
        while the process runs, so it is resolved here.
        """
        session = requests.Session()
        if self.base_url:
            session.proxies.update(requests.utils.get_environ_proxies(self.base_url))
        session.verify = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or True
        session.trust_env = False
        return session

    @property
    def model(self) -> str:
        return self.config.model or self.default_model

    @property
    def base_url(self) -> str:
        return (self.config.base_url or self.default_base_url).rstrip("/")

    def call(self, messages: Sequence[ChatMessage]) -> Completion:
        """Run one completion. Never raises for runtime failures: returns ``text=None`` with
        a ``FailureKind`` and logs the failure once, without any message text."""
        start = time.perf_counter()
        if self.needs_key and not self.config.api_key:
            attempt = Attempt(failure=FailureKind.NOT_CONFIGURED, detail="no API key configured")
        else:
            attempt = self._attempt(tuple(messages))
        detail = scrub_detail(attempt.detail, messages)
        completion = Completion(
            text=attempt.text if attempt.failure is None else None,
            provider=self.name,
            model=self.model,
            failure=attempt.failure,
            detail=detail,
            status_code=attempt.status_code,
            elapsed_ms=(time.perf_counter() - start) * 1000.0,
            request_bytes=attempt.request_bytes,
            response_bytes=attempt.response_bytes,
        )
        if completion.failure is not None:
            log.warning(
                "provider call failed: provider=%s model=%s kind=%s status=%s "
                "elapsed_ms=%.1f detail=%s",
                completion.provider,
                completion.model,
                completion.failure.value,
                completion.status_code,
                completion.elapsed_ms,
                completion.detail,
            )
        else:
            log.debug(
                "provider call ok: provider=%s model=%s elapsed_ms=%.1f bytes_out=%d bytes_in=%d",
                completion.provider,
                completion.model,
                completion.elapsed_ms,
                completion.request_bytes,
                completion.response_bytes,
            )
        return completion

    def complete(self, messages: Sequence[ChatMessage]) -> str | None:
        """The pipeline's view of a provider: text or ``None``."""
        return self.call(messages).text

    def probe(self, timeout_s: float = 2.0) -> ProbeResult:
        """Whether the provider can answer; HTTP providers override this with a real request."""
        if self.needs_key and not self.config.api_key:
            return ProbeResult(ok=False, detail="no API key configured")
        return ProbeResult(ok=True, detail="ready")

    @abstractmethod
    def _attempt(self, messages: tuple[ChatMessage, ...]) -> Attempt:
        """Produce text or a classified failure for ``messages``."""


def ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


