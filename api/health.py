"""`GET /health`: the real state of the database, the provider chain and the judge.

The database is write-probed on a new connection each time (`storage/health.py`): its
`state` is `ok`, `read_only`, `full`, `locked` or `unavailable`, and anything but `ok`
answers 503. A provider that does not answer carries a `hint`: what an operator can do
(`llm/hints.py`). Providers are probed with a cheap authenticated GET (their model list), at
most once per `PROBE_TTL_S`, so a load balancer polling `/health` does not hammer a paid API.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Literal

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, Field

from api.database import database as app_database
from api.declare import Reply, operation
from api.services import services
from llm.hints import fix_hint, probe_failure
from providers import FallbackChain, ProbeResult
from storage.health import probe_database

bp = Blueprint("health", __name__)

PROBE_TTL_S = 30.0
PROBE_TIMEOUT_S = 2.0


class DatabaseState(BaseModel):
    ok: bool
    state: Literal["ok", "read_only", "full", "locked", "unavailable"]
    detail: str
    free_bytes: int | None
    probe_ms: float


class BreakerView(BaseModel):
    state: str = Field(description="`closed`, `open` or `half_open`")
    failures: int
    retry_at: str | None


class ProviderEntry(BaseModel):
    """One provider of the chain; `hint` (what an operator can do) only when it does not answer,
    `breaker` only when circuit breaking is on."""

    name: str
    model: str | None
    ok: bool
    detail: str
    hint: str | None = None
    breaker: BreakerView | None = None


class ProviderState(ProviderEntry):
    """The primary provider's entry; `ok` says whether the chain as a whole can answer."""

    chain: list[ProviderEntry]


class JudgeState(BaseModel):
    available: bool
    reason: str | None
    pool: bool | None = None


class Health(BaseModel):
    """503 (same body) when the database cannot be written; `degraded` when no provider answers."""

    status: Literal["ok", "degraded"]
    database: DatabaseState
    provider: ProviderState
    judge: JudgeState


class ProviderProbe:
    """Cached reachability of every provider of a chain (one instance per app)."""

    def __init__(self, chain: FallbackChain, ttl_s: float = PROBE_TTL_S) -> None:
        self.chain = chain
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._results: list[ProbeResult] = []

    def results(self) -> list[ProbeResult]:
        with self._lock:
            if time.monotonic() - self._checked_at > self.ttl_s:
                self._results = [provider.probe(PROBE_TIMEOUT_S) for provider in self.chain.providers]
                self._checked_at = time.monotonic()
            return list(self._results)

    def report(self) -> dict[str, Any]:
        """The primary's entry, then every provider with its probe and its circuit (read now,
        not cached): the chain is ok when some provider is reachable and its circuit not open."""
        results = self.results()
        entries: list[dict[str, Any]] = [
            {"name": provider.name, "model": provider.model, "ok": result.ok, "detail": result.detail}
            for provider, result in zip(self.chain.providers, results, strict=True)
        ]
        for entry in entries:
            if not entry["ok"]:
                entry["hint"] = fix_hint(entry["name"], entry["model"], probe_failure(entry["detail"]))
        usable = [entry["ok"] for entry in entries]
        for index, state in enumerate(self.chain.breaker_states() or ()):
            entries[index]["breaker"] = state.to_dict()
            usable[index] = usable[index] and state.state != "open"
        primary = entries[0]
        return {**primary, "ok": any(usable), "chain": entries}


def judge_state() -> dict[str, Any]:
    """Asked of the engine on every call (a ping and an image list), not remembered."""
    judge = services().judge
    if judge is None:
        return dict(services().judge_status)
    available, reason = judge.available()
    return {"available": available, "reason": reason, "pool": judge.pool is not None}


@bp.get("/health")
@operation(
    "The real state of the database, the providers and the judge",
    auth=False,
    replies={
        200: Reply("the database can be written", Health),
        503: Reply("the database cannot be written", Health),
    },
)
def health() -> ResponseReturnValue:
    database = probe_database(app_database()).to_dict()
    provider = services().provider_probe.report()
    judge = judge_state()
    status = "ok" if database["ok"] and provider["ok"] else "degraded"
    answer = Health.model_validate({"status": status, "database": database, "provider": provider, "judge": judge})
    return jsonify(answer.model_dump(mode="json", exclude_unset=True)), 200 if database["ok"] else 503
