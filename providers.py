"""The provider layer: LLM servers used as plain text chat-completion engines.

Every provider turns a list of ``ChatMessage`` (roles system/user/assistant only) into one
``Completion`` whose ``text`` is a ``str`` or ``None``. No tool schemas are ever sent and no
native tool calls are read: the orchestrator reads commands out of plain text itself, so a
provider only has to move text. Runtime failures never raise; they are classified into a
``FailureKind`` so that the pipeline (retry once, then 502) and the ``FallbackChain`` can act
on them, and they are logged without any prompt text because prompts hold user data.
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Literal

import requests
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

log = logging.getLogger("providers")

Sleep = Callable[[float], None]

#: How the pipeline frames a tool result for the second pass (SPEC 6.3). The scripted
#: provider recognises it so demo scripts can answer tool results.
TOOL_RESULT_RE = re.compile(r"^Tool result for /([A-Za-z][A-Za-z0-9_]*)")

_DETAIL_MAX = 200


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
class _Attempt:
    """What a concrete provider reports back to ``Provider.call``, before timing is added."""

    text: str | None = None
    failure: FailureKind | None = None
    detail: str = ""
    status_code: int | None = None
    request_bytes: int = 0
    response_bytes: int = 0


def _text_or_failure(content: Any, **extra: Any) -> _Attempt:
    """Apply the one rule every provider shares: a non-blank ``str`` or a classified failure."""
    if content is None:
        return _Attempt(failure=FailureKind.EMPTY, detail="content is null or missing", **extra)
    if not isinstance(content, str):
        kind = type(content).__name__
        return _Attempt(failure=FailureKind.MALFORMED, detail=f"content is {kind}, not str", **extra)
    if not content.strip():
        return _Attempt(failure=FailureKind.EMPTY, detail="content is blank", **extra)
    return _Attempt(text=content, **extra)


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
            attempt = _Attempt(failure=FailureKind.NOT_CONFIGURED, detail="no API key configured")
        else:
            attempt = self._attempt(tuple(messages))
        detail = _scrub(attempt.detail, messages)
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
    def _attempt(self, messages: tuple[ChatMessage, ...]) -> _Attempt:
        """Produce text or a classified failure for ``messages``."""


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)


def _scrub(detail: str, messages: Sequence[ChatMessage]) -> str:
    """Keep details short and free of prompt text: upstream error bodies sometimes echo the
    input, and details end up in logs and SSE events."""
    for message in messages:
        content = message.content.strip()
        if len(content) >= 4 and content in detail:
            detail = detail.replace(content, "[redacted]")
    return detail[:_DETAIL_MAX]


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
        """Pull the reply content out of a 200 body; return ``_Attempt`` for shape errors."""

    probe_path: ClassVar[str] = "/models"

    def probe(self, timeout_s: float = 2.0) -> ProbeResult:
        """A cheap authenticated GET (model list) that proves the server answers and the key works."""
        if self.needs_key and not self.config.api_key:
            return super().probe(timeout_s)
        started = time.perf_counter()
        try:
            response = self.http.get(f"{self.base_url}{self.probe_path}", headers=self.headers(), timeout=timeout_s)
        except requests.Timeout:
            return ProbeResult(ok=False, detail="timeout", elapsed_ms=_ms_since(started))
        except requests.RequestException:
            return ProbeResult(ok=False, detail="connection failed", elapsed_ms=_ms_since(started))
        status = response.status_code
        detail = "reachable" if status < 400 else f"HTTP {status} ({_status_failure(status).value})"
        return ProbeResult(ok=status < 400, detail=detail, elapsed_ms=_ms_since(started))

    def headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers

    def _attempt(self, messages: tuple[ChatMessage, ...]) -> _Attempt:
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
                return _Attempt(None, FailureKind.TIMEOUT, type(exc).__name__, None,
                                sent, received)
            except requests.RequestException as exc:
                return _Attempt(None, FailureKind.CONNECTION, type(exc).__name__, None,
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
                return _Attempt(None, _status_failure(status), message, status, **sizes)
            if not decoded:
                return _Attempt(None, FailureKind.MALFORMED, "response is not JSON", status,
                                **sizes)
            parsed = self.parse_reply(data)
            if isinstance(parsed, _Attempt):
                return _Attempt(None, parsed.failure, parsed.detail, status, **sizes)
            return _text_or_failure(parsed, status_code=status, **sizes)


def _upstream_error(data: dict[str, Any]) -> _Attempt | None:
    """A 200 body that carries an ``error`` object (OpenRouter forwards upstream failures so)."""
    if data.get("error"):
        return _Attempt(failure=FailureKind.UPSTREAM_ERROR,
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
            return _Attempt(failure=FailureKind.MALFORMED, detail="body is not an object")
        upstream = _upstream_error(data)
        if upstream is not None:
            return upstream
        message = data.get("message")
        if not isinstance(message, dict):
            return _Attempt(failure=FailureKind.MALFORMED, detail="no message object")
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
            return _Attempt(failure=FailureKind.MALFORMED, detail="body is not an object")
        upstream = _upstream_error(data)
        if upstream is not None:
            return upstream
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return _Attempt(failure=FailureKind.MALFORMED, detail="no choices[0]")
        choice = choices[0]
        upstream = _upstream_error(choice)
        if upstream is not None:
            return upstream
        message = choice.get("message")
        if not isinstance(message, dict):
            return _Attempt(failure=FailureKind.MALFORMED, detail="no choices[0].message")
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


# --- scripted provider -------------------------------------------------------------------


class UserRule(BaseModel):
    """Reply when the last user message (not a tool result) matches ``user`` (re.search, i)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    user: str
    reply: str


class AfterToolRule(BaseModel):
    """Reply when the last user message is the result of ``/<after_tool>``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    after_tool: str
    reply: str


class RuleScript(BaseModel):
    """Demo script: first matching rule wins, else ``default``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rules: list[UserRule | AfterToolRule] = Field(default_factory=list)
    default: str


_SCRIPT = TypeAdapter(list[str | None] | RuleScript)


class ScriptedProvider(Provider):
    """Replies read from a JSON file (``SCRIPTED_REPLIES``): a list consumed in order (tests),
    or regex rules (demos that run without any model). A product module, so it obeys the same
    contract as the HTTP providers: text or ``None`` with a ``FailureKind``."""

    name = "scripted"
    needs_key = False
    default_base_url = ""
    default_model = "scripted"

    def __init__(
        self,
        config: ProviderConfig,
        *,
        http: requests.Session | None = None,
        sleep: Sleep = time.sleep,
    ) -> None:
        super().__init__(config, http=http, sleep=sleep)
        self.script = load_script(config.scripted_replies)
        self._patterns: list[tuple[re.Pattern[str] | None, UserRule | AfterToolRule]] = []
        if isinstance(self.script, RuleScript):
            for rule in self.script.rules:
                pattern = None
                if isinstance(rule, UserRule):
                    try:
                        pattern = re.compile(rule.user, re.IGNORECASE)
                    except re.error as exc:
                        raise ProviderError(f"bad regex {rule.user!r} in script: {exc}") from exc
                self._patterns.append((pattern, rule))
        self._cursor = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int | None:
        """Replies left in a list script (``None`` for a rule script, which never runs out)."""
        if not isinstance(self.script, list):
            return None
        with self._lock:
            return len(self.script) - self._cursor

    def _attempt(self, messages: tuple[ChatMessage, ...]) -> _Attempt:
        sent = sum(len(m.content.encode("utf-8")) for m in messages)
        if isinstance(self.script, list):
            with self._lock:
                if self._cursor >= len(self.script):
                    return _Attempt(failure=FailureKind.SCRIPT_EXHAUSTED,
                                    detail=f"all {len(self.script)} replies used",
                                    request_bytes=sent)
                reply = self.script[self._cursor]
                self._cursor += 1
        else:
            reply = self._match(messages)
        received = len(reply.encode("utf-8")) if reply is not None else 0
        return _text_or_failure(reply, request_bytes=sent, response_bytes=received)

    def _match(self, messages: Sequence[ChatMessage]) -> str:
        assert isinstance(self.script, RuleScript)
        last = next((m.content for m in reversed(messages) if m.role == "user"), "")
        tool = TOOL_RESULT_RE.match(last)
        for pattern, rule in self._patterns:
            if tool is None and pattern is not None and pattern.search(last):
                return rule.reply
            if (
                tool is not None
                and isinstance(rule, AfterToolRule)
                and rule.after_tool.lstrip("/").lower() == tool.group(1).lower()
            ):
                return rule.reply.replace("{result}", quoted_result(last.partition("\n")[2]))
        return self.script.default


def quoted_result(result: str) -> str:
    """The readable text of a tool-result block: its `> ` lines, unquoted and unescaped.

    Results reach a provider in the stored contract form (a `<details>` block with every
    line quoted and HTML-escaped); a demo reply wants just the text. Anything that is not
    in that form is returned as it is.
    """
    quoted = [line for line in result.splitlines() if line == ">" or line.startswith("> ")]
    if not quoted:
        return result
    return html.unescape("\n".join(line[2:] for line in quoted))


def load_script(path: str | None) -> list[str | None] | RuleScript:
    """Read and validate a reply script once; any problem is a developer error."""
    if not path:
        raise ProviderError("the scripted provider needs SCRIPTED_REPLIES (a JSON file path)")
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ProviderError(f"cannot read scripted replies {path!r}: {exc}") from exc
    try:
        return _SCRIPT.validate_json(raw)
    except ValidationError as exc:
        raise ProviderError(f"invalid scripted replies {path!r}: {exc}") from exc


# --- registry, construction, fallbacks --------------------------------------------------


def provider_registry() -> dict[str, type[Provider]]:
    """Every provider the product knows, registered explicitly in one place."""
    registry: dict[str, type[Provider]] = {}

    def register(cls: type[Provider]) -> None:
        registry[cls.name] = cls

    register(OllamaProvider)
    register(OpenAICompatibleProvider)
    register(OpenRouterProvider)
    register(CerebrasProvider)
    register(ChutesProvider)
    register(ScriptedProvider)
    return registry


def build_provider(
    config: ProviderConfig,
    *,
    http: requests.Session | None = None,
    sleep: Sleep = time.sleep,
) -> Provider:
    """Instantiate the provider named by ``config.provider``."""
    registry = provider_registry()
    cls = registry.get(config.provider.strip().lower())
    if cls is None:
        known = ", ".join(sorted(registry))
        raise ProviderError(f"unknown provider {config.provider!r} (known: {known})")
    return cls(config, http=http, sleep=sleep)


class FallbackChain:
    """What the pipeline holds: the primary provider, then ``LLM_FALLBACKS`` in order."""

    def __init__(self, providers: Sequence[Provider]) -> None:
        if not providers:
            raise ProviderError("a fallback chain needs at least one provider")
        self.providers: tuple[Provider, ...] = tuple(providers)

    @property
    def primary(self) -> Provider:
        return self.providers[0]

    def call(self, messages: Sequence[ChatMessage]) -> Completion:
        """First success wins; if every provider fails, the last failure is returned (each
        provider has already logged its own failure)."""
        messages = tuple(messages)
        result: Completion | None = None
        for index, provider in enumerate(self.providers):
            result = provider.call(messages)
            if result.text is not None:
                return result
            if index + 1 < len(self.providers):
                nxt = self.providers[index + 1]
                log.info("falling back: from=%s/%s kind=%s to=%s/%s", provider.name,
                         provider.model, result.failure.value if result.failure else None,
                         nxt.name, nxt.model)
        assert result is not None
        log.warning("all %d providers failed; last kind=%s", len(self.providers),
                    result.failure.value if result.failure else None)
        return result

    def complete(self, messages: Sequence[ChatMessage]) -> str | None:
        return self.call(messages).text


def parse_fallbacks(spec: str) -> list[tuple[str, str]]:
    """``"openrouter:meta/llama-3,ollama:qwen2.5:7b"`` -> ``[(provider, model), ...]``.
    Split on the first colon only: model names may contain colons."""
    entries: list[tuple[str, str]] = []
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue
        provider, sep, model = entry.partition(":")
        provider, model = provider.strip().lower(), model.strip()
        if not sep or not provider or not model:
            raise ProviderError(f"bad fallback entry {entry!r}: expected provider:model")
        entries.append((provider, model))
    return entries


def build_chain(
    primary: ProviderConfig,
    fallbacks: str = "",
    *,
    api_keys: Mapping[str, str] | None = None,
    http: requests.Session | None = None,
    sleep: Sleep = time.sleep,
) -> FallbackChain:
    """Build the primary provider plus ``LLM_FALLBACKS``. A fallback of the same provider
    reuses the primary's base URL and key; another provider uses its default base URL and
    the key found in ``api_keys[name]`` (if any). Timeouts and retry bounds are inherited."""
    registry = provider_registry()
    keys = dict(api_keys or {})
    providers = [build_provider(primary, http=http, sleep=sleep)]
    for name, model in parse_fallbacks(fallbacks):
        if name not in registry:
            raise ProviderError(f"unknown fallback provider {name!r}")
        same = name == primary.provider
        config = primary.model_copy(update={
            "provider": name,
            "model": model,
            "base_url": primary.base_url if same else None,
            "api_key": keys.get(name, primary.api_key if same else None),
        })
        providers.append(build_provider(config, http=http, sleep=sleep))
    return FallbackChain(providers)
