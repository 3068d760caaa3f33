"""`GET /health`: the real state of the database, the provider chain and the judge.

The database is write-probed on a new connection each time (`storage/health.py`): its
`state` is `ok`, `read_only`, `full`, `locked` or `unavailable`, and anything but `ok`
answers 503. The providers' part is `providers.ProviderProbe`'s report (cached, with a
`hint` for a provider that does not answer); the judge is asked on every call.
"""

from __future__ import annotations

from typing import Any, Literal

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, Field

from api.database import database as app_database
from api.declare import Reply, operation
from api.services import services
from storage.health import probe_database

bp = Blueprint("health", __name__)


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
