"""The provider layer: LLM servers used as plain text chat-completion engines.

Every provider turns a list of ``ChatMessage`` (roles system/user/assistant only) into one
``Completion`` whose ``text`` is a ``str`` or ``None``, streaming the text to a ``StreamSink``
piece by piece as it arrives (``stream``), or all at once (``call``). No tool schemas are ever sent and no
native tool calls are read: the orchestrator reads commands out of plain text itself, so a
provider only has to move text. Runtime failures never raise; they are classified into a
``FailureKind`` so that the pipeline (retry once, then 502) and the ``FallbackChain`` can act
on them, and they are logged without any prompt text because prompts hold user data.

This module is the layer's public face: the registry, construction, the fallback chain and
the health probe (`ProviderProbe`).
The types and base class are in `llm/base.py`; the HTTP exchange policy in `llm/http.py`,
one module per wire format (`llm/openai_wire.py`, `llm/ollama_wire.py`); every call goes
through `requests` (`llm/transport.py`: the first-token deadline and the idle timer, cancel
through `llm/abort.py`); the SSE and NDJSON framing is in `llm/framing.py`, the scripted provider
in `llm/scripted.py`, the circuit breaker each provider of a chain has in
`llm/breaker.py`; everything a caller needs is re-exported from here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import requests

from config.settings import ConfigError, Settings
from foundation.cancellation import CancelToken
from llm.base import (
    ChatMessage,
    Completion,
    FailureKind,
    Odds,
    ProbeResult,
    Provider,
    ProviderConfig,
    ProviderError,
    Sleep,
    StreamSink,
    TokenOdds,
    log,
)
from llm.breaker import BreakerPolicy, BreakerState, CircuitBreaker
from llm.hints import fix_hint, probe_failure
from llm.http import HttpProvider
from llm.last_call import LastCall
from llm.ollama_wire import OllamaProvider
from llm.openai_wire import CerebrasProvider, ChutesProvider, OpenAICompatibleProvider, OpenRouterProvider
from llm.scripted import ScriptedProvider, load_script, quoted_result
from llm.wait import TurnWait
from observe.telemetry import Telemetry

__all__ = [
    "BreakerPolicy",
    "BreakerState",
    "CerebrasProvider",
    "ChatMessage",
    "ChutesProvider",
    "Completion",
    "FailureKind",
    "FallbackChain",
    "HttpProvider",
    "Odds",
    "OllamaProvider",
    "OpenAICompatibleProvider",
    "OpenRouterProvider",
    "ProbeResult",
    "Provider",
    "ProviderConfig",
    "ProviderError",
    "ProviderProbe",
    "ScriptedProvider",
    "StreamSink",
    "TokenOdds",
    "TurnWait",
    "breaker_policy",
    "build_chain",
    "build_provider",
    "check_provider_name",
    "entry_id",
    "llm_config",
    "load_script",
    "parse_fallbacks",
    "provider_registry",
    "quoted_result",
    "vision_config",
]


def check_provider_name(setting: str, name: str | None) -> None:
    """A provider name a setting gives must be the registry's; a ConfigError naming the setting."""
    if name is not None and name.strip().lower() not in provider_registry():
        known = ", ".join(sorted(provider_registry()))
        raise ConfigError(f"invalid configuration: {setting}: unknown provider {name!r} (one of {known})")


def llm_config(settings: Settings) -> ProviderConfig:
    """The chat model's provider (`LLM_*`)."""
    check_provider_name("LLM_PROVIDER", settings.llm_provider)
    return ProviderConfig(
        provider=settings.llm_provider,
        model=settings.llm_model,
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        timeout_s=settings.llm_timeout_s,
        idle_timeout_s=settings.llm_idle_timeout_s,
        max_tokens=settings.llm_max_tokens,
        temperature=settings.llm_temperature,
        seed=settings.llm_seed,
        scripted_replies=settings.scripted_replies,
    )


def vision_config(settings: Settings) -> ProviderConfig:
    """The vision provider; every unset `VISION_*` value falls back to its `LLM_*` value."""
    check_provider_name("VISION_PROVIDER", settings.vision_provider)
    base = llm_config(settings)
    if settings.vision_provider is None or settings.vision_provider == settings.llm_provider:
        return base.model_copy(
            update={
                "model": settings.vision_model or base.model,
                "base_url": settings.vision_base_url or base.base_url,
                "api_key": settings.vision_api_key or base.api_key,
            }
        )
    return base.model_copy(
        update={
            "provider": settings.vision_provider,
            "model": settings.vision_model,
            "base_url": settings.vision_base_url,
            "api_key": settings.vision_api_key,
        }
    )


def breaker_policy(settings: Settings) -> BreakerPolicy | None:
    """Each provider's circuit breaker (llm/breaker.py), or None when turned off."""
    if settings.provider_breaker_failures == 0:
        return None
    return BreakerPolicy(failures=settings.provider_breaker_failures, cooldown_s=settings.provider_breaker_cooldown_s)


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
    sleep: Sleep | None = None,
) -> Provider:
    """Instantiate the provider named by ``config.provider``."""
    registry = provider_registry()
    cls = registry.get(config.provider.strip().lower())
    if cls is None:
        known = ", ".join(sorted(registry))
        raise ProviderError(f"unknown provider {config.provider!r} (known: {known})")
    return cls(config, http=http, sleep=sleep)


def entry_id(provider: Provider) -> str:
    """A chain entry's id: `provider:model`, as `LLM_FALLBACKS` writes it."""
    return f"{provider.name}:{provider.model}"


class FallbackChain:
    """What the pipeline holds: the primary provider, then ``LLM_FALLBACKS`` in order.

    With a ``breaker`` policy each provider has its own circuit (`llm/breaker.py`): a
    provider whose circuit is open is skipped without a call, so a hung one costs nothing
    until its cool-down ends, and a chain whose every circuit is open fails at once. Each
    provider's last real call is kept (`llm/last_call.py`) for the model banner and `/health`.
    """

    def __init__(
        self, providers: Sequence[Provider], breaker: BreakerPolicy | None = None, telemetry: Telemetry | None = None
    ) -> None:
        if not providers:
            raise ProviderError("a fallback chain needs at least one provider")
        self.providers: tuple[Provider, ...] = tuple(providers)
        self.breakers: tuple[CircuitBreaker, ...] | None = (
            tuple(CircuitBreaker(breaker) for _ in self.providers) if breaker is not None else None
        )
        self.last_calls: tuple[LastCall, ...] = tuple(LastCall() for _ in self.providers)
        self.telemetry = telemetry or Telemetry.off()  # a `chat {model}` span and the counts of each call

    @property
    def primary(self) -> Provider:
        return self.providers[0]

    def close(self) -> None:
        """Close every provider's idle connections (the app is shutting down)."""
        for provider in self.providers:
            provider.close()

    def entry_ids(self) -> list[str]:
        """Each provider's `provider:model` id, in chain order (the ids `LLM_FALLBACKS` uses)."""
        return [entry_id(provider) for provider in self.providers]

    def starting_with(self, chosen: str) -> FallbackChain | None:
        """The same chain with entry `chosen` first and the others after it in their order, or
        None when no entry has that id. The providers, their circuits and the telemetry are
        shared, so a provider's circuit is the same whichever entry a session starts with."""
        ids = self.entry_ids()
        if chosen not in ids:
            return None
        first = ids.index(chosen)
        order = [first, *(index for index in range(len(ids)) if index != first)]
        chain = FallbackChain([self.providers[index] for index in order], None, self.telemetry)
        if self.breakers is not None:
            chain.breakers = tuple(self.breakers[index] for index in order)
        chain.last_calls = tuple(self.last_calls[index] for index in order)
        return chain

    def breaker_states(self) -> list[BreakerState] | None:
        """Each provider's circuit, in chain order (None without a breaker policy)."""
        return None if self.breakers is None else [breaker.snapshot() for breaker in self.breakers]

    def stream(
        self,
        messages: Sequence[ChatMessage],
        sink: StreamSink | None = None,
        *,
        cancel: CancelToken | None = None,
        grammar: str | None = None,
        wait: TurnWait | None = None,
    ) -> Completion:
        """First success wins; each attempt starts with ``sink.begin(name, model)`` so the
        sink can drop what a failed attempt fed. A cancelled call returns at once (no
        fallback); a provider whose circuit is open is skipped (a ``CIRCUIT_OPEN`` failure,
        no call, its ``cause`` the fault that opened it). ``wait``: the turn's wait for a
        first token (`llm/wait.py`): each call's deadline is within what is left, no call is
        made once it is used up, and it is the turn's key for the breakers. If every provider
        fails, the last real call's failure is returned (a skip only when nothing was called;
        each provider has already logged its own failure)."""
        messages = tuple(messages)
        result: Completion | None = None
        called: Completion | None = None  # the last call that reached a provider
        for index, provider in enumerate(self.providers):
            breaker = self.breakers[index] if self.breakers is not None else None
            if wait is not None and wait.exhausted():
                log.info("no further provider called: the turn's wait for the model (LLM_WAIT_S) is used up")
                result = result or _wait_used_up(provider, wait)
                break
            if breaker is not None and not breaker.admit():
                result = Completion(
                    text=None,
                    provider=provider.name,
                    model=provider.model,
                    failure=FailureKind.CIRCUIT_OPEN,
                    detail=breaker.refusal_detail(),
                    elapsed_ms=0.0,
                    cause=breaker.last_fault,
                )
                log.info("provider skipped: provider=%s model=%s %s", provider.name, provider.model, result.detail)
                self.telemetry.provider_skipped(result)
            else:
                result = called = self._call(index, provider, messages, sink, cancel, grammar, wait)
            if result.text is not None or result.failure is FailureKind.CANCELLED:
                return result
            if cancel is not None and cancel.cancelled:  # a failure that raced with the cancel
                return result
            if index + 1 < len(self.providers):
                nxt = self.providers[index + 1]
                log.info(
                    "falling back: from=%s/%s kind=%s to=%s/%s",
                    provider.name,
                    provider.model,
                    result.failure.value if result.failure else None,
                    nxt.name,
                    nxt.model,
                )
        assert result is not None
        result = called or result
        log.warning(
            "all %d providers failed; last kind=%s",
            len(self.providers),
            result.failure.value if result.failure else None,
        )
        return result

    def _call(
        self,
        index: int,
        provider: Provider,
        messages: tuple[ChatMessage, ...],
        sink: StreamSink | None,
        cancel: CancelToken | None,
        grammar: str | None,
        wait: TurnWait | None,
    ) -> Completion:
        """One real call of chain entry `index`, recorded by its breaker, its last call and `wait`."""
        if sink is not None:
            sink.begin(provider.name, provider.model)
        with self.telemetry.chat(
            provider.name, provider.model, lambda: [(m.role, m.content) for m in messages]
        ) as call:
            if wait is None:
                result = provider.stream(messages, sink, cancel=cancel, grammar=grammar)
            else:
                deadline = wait.deadline(provider.config.timeout_s)
                result = provider.stream(messages, sink, cancel=cancel, grammar=grammar, deadline=deadline)
            call.finish(result)
        if wait is not None:
            wait.spend(result)
        if self.breakers is not None:
            self.breakers[index].record(result.failure, wait)
        self.last_calls[index].record(result)
        return result

    def call(
        self, messages: Sequence[ChatMessage], *, cancel: CancelToken | None = None, grammar: str | None = None
    ) -> Completion:
        """The whole reply at once: ``stream`` without a sink."""
        return self.stream(messages, None, cancel=cancel, grammar=grammar)

    def complete(self, messages: Sequence[ChatMessage]) -> str | None:
        return self.call(messages).text


def _wait_used_up(provider: Provider, wait: TurnWait) -> Completion:
    """The failure of a pass that may make no call: its turn waited `LLM_WAIT_S` already."""
    return Completion(
        text=None,
        provider=provider.name,
        model=provider.model,
        failure=FailureKind.TIMEOUT,
        detail=f"the turn's wait for a first token ({wait.wait_s:g} s, LLM_WAIT_S) is used up",
        elapsed_ms=0.0,
    )


PROBE_TTL_S = 30.0
PROBE_TIMEOUT_S = 2.0


class ProviderProbe:
    """Cached reachability of every provider of a chain (one instance per app).

    Each provider is probed with a cheap authenticated GET (its model list), at most once
    per `ttl_s`, so a load balancer polling `/health` does not hammer a paid API. A provider
    that does not answer carries a `hint`: what an operator can do (`llm/hints.py`)."""

    def __init__(self, chain: FallbackChain, ttl_s: float = PROBE_TTL_S) -> None:
        self.chain = chain
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._results: list[ProbeResult] = []

    def results(self, max_age_s: float | None = None) -> list[ProbeResult]:
        """The cached probes, probed again when older than `ttl_s` (or `max_age_s`, when shorter:
        a page that saw a turn fail asks again sooner, still at most once per `max_age_s`)."""
        ttl_s = self.ttl_s if max_age_s is None else min(self.ttl_s, max_age_s)
        with self._lock:
            if time.monotonic() - self._checked_at > ttl_s:
                self._results = [provider.probe(PROBE_TIMEOUT_S) for provider in self.chain.providers]
                self._checked_at = time.monotonic()
            return list(self._results)

    def known(self) -> list[ProbeResult] | None:
        """The last probe's results without probing again (None before the first probe)."""
        with self._lock:
            return None if self._checked_at == float("-inf") else list(self._results)

    def report(self, max_age_s: float | None = None) -> dict[str, Any]:
        """The primary's entry, then every provider with its probe, its last real call's
        verdict (`llm/last_call.py`: a turn that just failed or just got its answer says more
        than a model list) and its circuit (read now, not cached): the chain is ok when some
        provider can answer and its circuit is not open. `last_failure` is an operator's
        detail of the last failed call (for `/health` and the admin page, never a user)."""
        results = self.results(max_age_s)
        with self._lock:
            probed_at = self._checked_at
        entries: list[dict[str, Any]] = []
        for provider, result, last in zip(self.chain.providers, results, self.chain.last_calls, strict=True):
            ok = last.verdict(probed_at, result.ok)
            failed = last.last_failure
            entry: dict[str, Any] = {"name": provider.name, "model": provider.model, "ok": ok, "detail": result.detail}
            if failed is not None:
                entry["last_failure"] = failed.to_dict()
            if not ok:
                kind = probe_failure(result.detail) if not result.ok or failed is None else failed.failure
                if result.ok and failed is not None and failed.failure is not None:
                    entry["detail"] = f"{result.detail}, but its last call failed ({failed.failure.value})"
                entry["hint"] = fix_hint(provider.name, provider.model, kind)
            entries.append(entry)
        usable = [entry["ok"] for entry in entries]
        for index, state in enumerate(self.chain.breaker_states() or ()):
            entries[index]["breaker"] = state.to_dict()
            usable[index] = usable[index] and state.state != "open"
        primary = entries[0]
        return {**primary, "ok": any(usable), "chain": entries}


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
    sleep: Sleep | None = None,
    breaker: BreakerPolicy | None = None,
    telemetry: Telemetry | None = None,
) -> FallbackChain:
    """Build the primary provider plus ``LLM_FALLBACKS``. A fallback of the same provider
    reuses the primary's base URL and key; another provider uses its default base URL and
    the key found in ``api_keys[name]`` (if any). Timeouts, ``max_tokens`` and retry bounds are inherited;
    ``breaker`` gives every provider a circuit (None: none)."""
    registry = provider_registry()
    keys = dict(api_keys or {})
    providers = [build_provider(primary, http=http, sleep=sleep)]
    for name, model in parse_fallbacks(fallbacks):
        if name not in registry:
            raise ProviderError(f"unknown fallback provider {name!r}")
        same = name == primary.provider
        config = primary.model_copy(
            update={
                "provider": name,
                "model": model,
                "base_url": primary.base_url if same else None,
                "api_key": keys.get(name, primary.api_key if same else None),
            }
        )
        providers.append(build_provider(config, http=http, sleep=sleep))
    return FallbackChain(providers, breaker, telemetry)
