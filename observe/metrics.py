"""The app's Prometheus metrics, in the app's own registry (never the library's global one).

Counters and histograms are counted where the thing happens (`Telemetry`'s hooks). Gauges of
state that already lives somewhere (circuit breakers, the sandbox and judge queues) are read
from their owners when `/metrics` is scraped (`Watched`), so nothing has to keep a copy in step.

Every process has its own registry and answers for itself: behind nginx or with several
server processes, Prometheus scrapes each process as its own target (README, "Traces, metrics
and logs").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

PREFIX = "orchestrator"
#: Turn and first-token times: a local model answers its first token in tens of ms, a busy
#: remote one in seconds; a turn with tools and a judge run can take minutes.
TURN_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
FIRST_TOKEN_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BREAKER_STATES = {"closed": 0.0, "half_open": 1.0, "open": 2.0}


class BreakerView(Protocol):
    """What a circuit reports (llm/breaker.py's `BreakerState`)."""

    @property
    def state(self) -> str: ...
    @property
    def failures(self) -> int: ...


class ProviderView(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str: ...


class ChainView(Protocol):
    """A provider chain as `/metrics` reads it (providers.py's `FallbackChain`)."""

    @property
    def providers(self) -> Sequence[ProviderView]: ...

    def breaker_states(self) -> Sequence[BreakerView] | None: ...


class GateView(Protocol):
    """A fair-share gate (foundation/fair_share.py's `FairGate`)."""

    @property
    def capacity(self) -> int: ...

    def waiting(self) -> int: ...

    def held(self) -> Mapping[Any, int]: ...


@dataclass
class Watched:
    """Owners of state read at scrape time; set once where the app is built."""

    chains: dict[str, ChainView] = field(default_factory=dict)  # "chat", "vision"
    gates: dict[str, Callable[[], GateView | None]] = field(default_factory=dict)  # "sandbox", "judge"


class _ScrapeTimeGauges:
    """A collector reading `Watched` when the registry is collected."""

    def __init__(self, watched: Watched) -> None:
        self.watched = watched

    def collect(self) -> Iterator[Metric]:
        breaker = GaugeMetricFamily(
            f"{PREFIX}_provider_breaker_state",
            "Each provider's circuit: 0 closed, 1 half-open (one probe call allowed), 2 open (fails fast)",
            labels=["chain", "provider", "model"],
        )
        failures = GaugeMetricFamily(
            f"{PREFIX}_provider_breaker_failures",
            "Consecutive server faults counted by each provider's circuit",
            labels=["chain", "provider", "model"],
        )
        seen: set[int] = set()
        for chain_name, chain in self.watched.chains.items():
            if id(chain) in seen:  # the vision chain is the chat chain unless VISION_* differ
                continue
            seen.add(id(chain))
            for provider, state in zip(chain.providers, chain.breaker_states() or (), strict=False):
                labels = [chain_name, provider.name, provider.model]
                breaker.add_metric(labels, BREAKER_STATES.get(state.state, 2.0))
                failures.add_metric(labels, float(state.failures))
        waiting = GaugeMetricFamily(
            f"{PREFIX}_queue_waiting", "Jobs waiting for a place: sandbox workers or judge runs", labels=["queue"]
        )
        busy = GaugeMetricFamily(f"{PREFIX}_queue_busy", "Places in use", labels=["queue"])
        capacity = GaugeMetricFamily(f"{PREFIX}_queue_capacity", "Places in all", labels=["queue"])
        for queue, find in self.watched.gates.items():
            gate = find()
            if gate is None:
                continue
            waiting.add_metric([queue], float(gate.waiting()))
            busy.add_metric([queue], float(sum(gate.held().values())))
            capacity.add_metric([queue], float(gate.capacity))
        yield from (breaker, failures, waiting, busy, capacity)

    def describe(self) -> Iterable[Metric]:
        return ()  # collected on every scrape, never at registration


class Metrics:
    """One app's instruments, registered in `registry` (created here, one per app)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.watched = Watched()
        registry = self.registry
        self.turns = Counter(
            f"{PREFIX}_turns", "Turns ended, by kind and outcome", ["kind", "outcome"], registry=registry
        )
        self.turn_seconds = Histogram(
            f"{PREFIX}_turn_duration_seconds",
            "A turn from its start on a worker to its terminal event",
            ["kind"],
            buckets=TURN_BUCKETS,
            registry=registry,
        )
        self.first_token_seconds = Histogram(
            f"{PREFIX}_time_to_first_token_seconds",
            "From a provider call's start to its first piece of text",
            ["provider"],
            buckets=FIRST_TOKEN_BUCKETS,
            registry=registry,
        )
        self.provider_calls = Counter(
            f"{PREFIX}_provider_calls",
            "Provider calls, by provider and outcome",
            ["provider", "outcome"],
            registry=registry,
        )
        self.provider_failures = Counter(
            f"{PREFIX}_provider_failures",
            "Provider calls that gave no text, by provider and failure class (llm/base.py FailureKind)",
            ["provider", "kind"],
            registry=registry,
        )
        self.tokens = Counter(
            f"{PREFIX}_provider_tokens",
            "Tokens the providers reported, by provider and direction (input, output)",
            ["provider", "type"],
            registry=registry,
        )
        self.tool_runs = Counter(
            f"{PREFIX}_tool_runs",
            "Tool runs, by tool and outcome (ok or the error code)",
            ["tool", "outcome"],
            registry=registry,
        )
        self.open_streams = Gauge(f"{PREFIX}_open_streams", "Event streams open now", registry=registry)
        self.rate_limited = Counter(
            f"{PREFIX}_rate_limit_refusals", "Requests refused 429 by a per-user budget", ["budget"], registry=registry
        )
        registry.register(_ScrapeTimeGauges(self.watched))
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Counter | Histogram, *labels: str) -> Any:
        """`metric.labels(*labels)`, looked up once: `labels()` checks and locks on every call,
        and a turn counts about ten times (bench/README.md, `telemetry_overhead.py`)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children.setdefault(key, metric.labels(*labels))
        return found

    def exposition(self) -> tuple[bytes, str]:
        """The text `/metrics` answers, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
