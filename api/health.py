"""`GET /health`, `GET /health/ready` and `GET /health/live`: is this server up, can it serve?

- `/health/live` (liveness): the process answers. It touches no dependency (no database, no
  provider, no judge, no Redis), so a flood of it costs a thread's moment and nothing else.
- `/health/ready` (readiness): each dependency's real state; 503 `not_ready` when a required
  one is down: the database (it must take a write) and Redis when `REDIS_URL` is set. The
  providers and the judge are reported but not required: without them the server still
  serves history, the UI and the API, and a turn answers 502 `provider_unavailable`.
- `/health` (SPEC 4): `{"status", "database", "provider", "judge"}`, plus `redis` with
  `REDIS_URL`; 503 when the database cannot be written or that Redis does not answer,
  `degraded` when no provider answers.

Both `/health` and `/health/ready` answer from the same per-app `Readiness`: each dependency's
probe runs at most once per `HEALTH_CACHE_S` (default 2 s) and never twice at once, whoever
calls. A caller that finds a result older than that while a probe is already running gets the
previous result instead of waiting for (or starting) another probe; only a server's first call
waits for the first probe. The probes themselves: the database is write-probed on a new
connection (`storage/health.py`: `ok`, `read_only`, `full`, `locked` or `unavailable`); the
providers' part is `providers.ProviderProbe`'s report (which probes each provider at most
every 30 s, with a `hint` for one that does not answer); the judge is asked of its engine;
Redis is pinged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypeVar

import redis
from flask import Blueprint, Flask, current_app, jsonify
from flask.blueprints import BlueprintSetupState
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, Field

from api.declare import Reply, operation
from api.services import services_of
from judge.preparing import JudgeStateName, build_running, judge_state
from storage.health import DatabaseHealth, probe_database

bp = Blueprint("health", __name__)

EXTENSION_KEY = "health.readiness"
REDIS_PROBE_TIMEOUT_S = 1.0  # a Redis that does not answer a ping within this is reported down

T = TypeVar("T")


@dataclass(frozen=True)
class Probed(Generic[T]):
    """One probe's answer and when it ran (UTC, ISO-8601 with ms)."""

    value: T
    checked_at: str


class CachedProbe(Generic[T]):
    """A dependency's probe, shared by every caller: run at most once per `ttl_s`, never twice at once.

    A caller that finds the answer stale while another caller's probe runs takes the previous
    answer; only when there is none yet does it wait for that probe."""

    def __init__(self, probe: Callable[[], T], ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.probe = probe
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._answer: Probed[T] | None = None
        self._probed_at = float("-inf")

    def _fresh(self) -> bool:
        return self._answer is not None and self.clock() - self._probed_at < self.ttl_s

    def get(self) -> Probed[T]:
        answer = self._answer
        if answer is not None and self._fresh():
            return answer
        if not self._lock.acquire(blocking=answer is None):
            assert answer is not None
            return answer  # another caller is probing: its answer comes soon, this one is recent
        try:
            if not self._fresh():  # a probe that ran while this caller waited for the lock is fresh
                checked_at = datetime.now(UTC).isoformat(timespec="milliseconds")
                value = self.probe()
                self._answer, self._probed_at = Probed(value, checked_at), self.clock()
            assert self._answer is not None
            return self._answer
        finally:
            self._lock.release()


@dataclass(frozen=True)
class Readiness:
    """One app's cached probes (kept in `app.extensions`); `redis` only with `REDIS_URL`."""

    ttl_s: float
    database: CachedProbe[DatabaseHealth]
    provider: CachedProbe[dict[str, Any]]
    judge: CachedProbe[dict[str, Any]]
    redis: CachedProbe[tuple[bool, str]] | None

    def probes(self) -> tuple[CachedProbe[Any], ...]:
        return tuple(probe for probe in (self.database, self.provider, self.judge, self.redis) if probe is not None)


def judge_probe(app: Flask) -> Callable[[], dict[str, Any]]:
    def probe() -> dict[str, Any]:
        """Asked of the engine (a ping and an image list) when the judge exists, else why not."""
        app_services = services_of(app)
        judge = app_services.judge
        preparing = build_running(app_services.settings.data_dir)
        if judge is None:
            status = dict(app_services.judge_status)
            state = judge_state(bool(status["available"]), str(status.get("reason") or ""), preparing)
            return {**status, "state": state}
        available, reason = judge.available()
        state = judge_state(available, reason, preparing)
        return {"available": available, "reason": reason, "pool": judge.pool is not None, "state": state}

    return probe


def redis_probe(url: str) -> Callable[[], tuple[bool, str]]:
    """A ping on a connection of its own, with a short timeout (the live state's waits are
    longer), opened and closed by each probe: probes are cached (`HEALTH_CACHE_S`), so this is
    one connection every few seconds at most, and nothing is left open when the app goes."""

    def probe() -> tuple[bool, str]:
        client = redis.Redis.from_url(
            url, socket_timeout=REDIS_PROBE_TIMEOUT_S, socket_connect_timeout=REDIS_PROBE_TIMEOUT_S
        )
        try:
            client.ping()
        except redis.RedisError as error:
            return False, f"Redis does not answer: {error}"
        finally:
            client.close()
        return True, "Redis answers a ping"

    return probe


def build_readiness(app: Flask) -> Readiness:
    app_services = services_of(app)
    ttl_s = app_services.settings.health_cache_s
    database = app_services.database
    redis_url = app_services.settings.redis_url
    return Readiness(
        ttl_s=ttl_s,
        database=CachedProbe(lambda: probe_database(database), ttl_s),
        provider=CachedProbe(app_services.provider_probe.report, ttl_s),
        judge=CachedProbe(judge_probe(app), ttl_s),
        redis=CachedProbe(redis_probe(redis_url), ttl_s) if redis_url else None,
    )


@bp.record_once
def install_readiness(state: BlueprintSetupState) -> None:
    """Each app gets its own probes when this blueprint is registered (services are built by then)."""
    assert isinstance(state.app, Flask)
    state.app.extensions[EXTENSION_KEY] = build_readiness(state.app)


def readiness_of(app: Flask) -> Readiness:
    found = app.extensions[EXTENSION_KEY]
    assert isinstance(found, Readiness), "registering the health blueprint installs the probes"
    return found


def readiness() -> Readiness:
    return readiness_of(current_app)


# the answers ----------------------------------------------------------------------------------


class DatabaseState(BaseModel):
    ok: bool
    state: Literal["ok", "read_only", "full", "locked", "unavailable"]
    detail: str
    free_bytes: int | None
    probe_ms: float
    checked_at: str = Field(description="when this probe ran (UTC); answers reuse it for `HEALTH_CACHE_S`")


class BreakerView(BaseModel):
    state: str = Field(description="`closed`, `open` or `half_open`")
    failures: int
    retry_at: str | None


class CallView(BaseModel):
    """A provider's last failed call, in an operator's words (never shown to users)."""

    ok: bool
    at: str = Field(description="when the call ended (UTC)")
    failure: str | None = Field(description="its failure class (`timeout`, `connection`, `server_error`...)")
    status_code: int | None
    detail: str = Field(description="what the provider code saw (never prompt text)")


class ProviderEntry(BaseModel):
    """One provider of the chain; `hint` (what an operator can do) only when it does not answer,
    `breaker` only when circuit breaking is on, `last_failure` once a call of a turn failed.
    `ok` is the freshest evidence: the probe, or a turn's call made since (`llm/last_call.py`)."""

    name: str
    model: str | None
    ok: bool
    detail: str
    hint: str | None = None
    breaker: BreakerView | None = None
    last_failure: CallView | None = None


class ProviderState(ProviderEntry):
    """The primary provider's entry; `ok` says whether the chain as a whole can answer."""

    chain: list[ProviderEntry]


class JudgeState(BaseModel):
    available: bool
    reason: str | None
    pool: bool | None = None
    state: JudgeStateName = Field(
        description="`ready`; `preparing` while `scripts/judge_images.sh` builds the images (`make run` starts it "
        "in the background); `off` (JUDGE_ENABLED=0); `unavailable`"
    )


class RedisState(BaseModel):
    ok: bool
    detail: str
    checked_at: str = Field(description="when this probe ran (UTC); answers reuse it for `HEALTH_CACHE_S`")


class Health(BaseModel):
    """503 (same body) when the database cannot be written or a configured Redis does not
    answer; `degraded` when no provider answers. `redis` only with `REDIS_URL`."""

    status: Literal["ok", "degraded"]
    database: DatabaseState
    provider: ProviderState
    judge: JudgeState
    redis: RedisState | None = None


class Check(BaseModel):
    """One dependency in `/health/ready`: a `required` one that is not `ok` makes the answer 503."""

    ok: bool
    required: bool
    detail: str
    checked_at: str = Field(description="when this probe ran (UTC); answers reuse it for `HEALTH_CACHE_S`")


class Ready(BaseModel):
    """Every dependency's check: `database`, `provider`, `judge`, and `redis` with `REDIS_URL`.
    The 503 answer is `{"error": {"code": "not_ready", "message", "details": <this body>}}`."""

    status: Literal["ready", "not_ready"]
    cache_s: float = Field(description="how long one probe is reused (`HEALTH_CACHE_S`)")
    checks: dict[str, Check]


class Alive(BaseModel):
    status: Literal["alive"]


def database_state(probed: Probed[DatabaseHealth]) -> dict[str, Any]:
    return {**probed.value.to_dict(), "checked_at": probed.checked_at}


def checks(probes: Readiness) -> dict[str, Check]:
    database, provider, judge = probes.database.get(), probes.provider.get(), probes.judge.get()
    found = {
        "database": Check(
            ok=database.value.ok, required=True, detail=database.value.detail, checked_at=database.checked_at
        ),
        "provider": Check(
            ok=provider.value["ok"],
            required=False,
            detail="; ".join(f"{entry['name']}: {entry['detail']}" for entry in provider.value["chain"]),
            checked_at=provider.checked_at,
        ),
        "judge": Check(
            ok=judge.value["available"],
            required=False,
            detail=judge.value["reason"] or "the engine answers and every image is present",
            checked_at=judge.checked_at,
        ),
    }
    if probes.redis is not None:
        pinged = probes.redis.get()
        ok, detail = pinged.value
        found["redis"] = Check(ok=ok, required=True, detail=detail, checked_at=pinged.checked_at)
    return found


@bp.get("/health")
@operation(
    "The real state of the database, the providers, the judge and Redis (with `REDIS_URL`)",
    auth=False,
    description="Answered from the probes `/health/ready` uses, each reused for `HEALTH_CACHE_S` seconds.",
    replies={
        200: Reply("the database can be written", Health),
        503: Reply("the database cannot be written, or a configured Redis does not answer", Health),
    },
)
def health() -> ResponseReturnValue:
    probes = readiness()
    database = database_state(probes.database.get())
    provider = probes.provider.get().value
    judge = probes.judge.get().value
    found: dict[str, Any] = {"database": database, "provider": provider, "judge": judge}
    required_ok = database["ok"]
    if probes.redis is not None:
        pinged = probes.redis.get()
        ok, detail = pinged.value
        found["redis"] = {"ok": ok, "detail": detail, "checked_at": pinged.checked_at}
        required_ok = required_ok and ok
    status = "ok" if required_ok and provider["ok"] else "degraded"
    answer = Health.model_validate({"status": status, **found})
    return jsonify(answer.model_dump(mode="json", exclude_unset=True)), 200 if required_ok else 503


@bp.get("/health/ready")
@operation(
    "Readiness: can this server serve? Each dependency's state, from probes cached briefly",
    auth=False,
    description="503 `not_ready` when the database cannot be written or a configured Redis does not answer; "
    "the providers and the judge are reported, not required. Probes are shared by every caller and "
    "reused for `HEALTH_CACHE_S` seconds.",
    replies={
        200: Reply("every required dependency answers", Ready),
        503: Reply("a required dependency is down (`not_ready`, the checks in `details`)"),
    },
)
def ready() -> ResponseReturnValue:
    probes = readiness()
    found = checks(probes)
    down = [name for name, check in found.items() if check.required and not check.ok]
    answer = Ready(status="not_ready" if down else "ready", cache_s=probes.ttl_s, checks=found)
    body = answer.model_dump(mode="json")
    if not down:
        return jsonify(body), 200
    message = "; ".join(f"{name}: {found[name].detail}" for name in down)
    return jsonify({"error": {"code": "not_ready", "message": message, "details": body}}), 503


@bp.get("/health/live")
@operation(
    "Liveness: the process answers (touches no database, provider, judge or Redis)",
    auth=False,
    replies={200: Reply("the process is up", Alive)},
)
def live() -> ResponseReturnValue:
    return jsonify({"status": "alive"}), 200
