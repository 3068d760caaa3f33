"""`GET /api/status`: can the model answer, can code run? What the web UI's banners poll.

`/health` is for operators and load balancers: each of its calls may write-probe the database.
The page needs less, and more often: whether some provider of the chain answers (to warn before
the user sends into a dead model) and the judge's state (to say the code runner is being
prepared). Both come from probes already cached: the providers' (`providers.ProviderProbe`,
reused up to 30 s) and the judge's (`/health`'s, reused for `HEALTH_CACHE_S`). With
`recheck=1` (the page asks so on load, on focus, after a failed turn and while the model is
down) a providers' probe older than `PROVIDER_RECHECK_S` is run again: one probe per that many
seconds at most, however many pages ask. A turn's own calls count too, when fresher than the
probe (`llm/last_call.py`): the banner comes with a failed turn and goes with the next answer.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, Field

from api.auth import require_user
from api.declare import Param, Reply, operation
from api.errors import ApiError
from api.health import readiness
from api.services import services
from judge.preparing import JudgeStateName

bp = Blueprint("status", __name__, url_prefix="/api")
bp.before_request(require_user)


class ModelProvider(BaseModel):
    name: str
    model: str | None
    ok: bool


class ModelStatus(BaseModel):
    ok: bool = Field(
        description="some provider of the chain answers (and its circuit is not open): by its probe, or by the "
        "last call of a turn when that is fresher"
    )
    message: str = Field(description="what a person reads: which model does not answer, or that it answers")
    providers: list[ModelProvider]


class JudgeStatus(BaseModel):
    state: JudgeStateName
    message: str


class Status(BaseModel):
    model: ModelStatus
    judge: JudgeStatus


JUDGE_MESSAGES: dict[str, str] = {
    "ready": "The code runner is ready.",
    "preparing": "The code runner is being prepared (its images are being built); the chat works meanwhile.",
    "off": "The code runner is switched off on this server.",
    "unavailable": "The code runner is not available on this server.",
}


def model_status(report: dict[str, Any]) -> ModelStatus:
    chain = report["chain"]
    providers = [ModelProvider(name=entry["name"], model=entry["model"], ok=entry["ok"]) for entry in chain]
    names = [f"{entry['model'] or entry['name']} ({entry['name']})" for entry in chain]
    if report["ok"]:
        message = "The model answers."
    elif len(names) == 1:
        message = f"The model {names[0]} does not answer."
    else:
        message = f"No model answers: neither {names[0]} nor its fallbacks ({', '.join(names[1:])})."
    return ModelStatus(ok=bool(report["ok"]), message=message, providers=providers)


@bp.get("/status")
@operation(
    "Whether the model answers and the code runner's state (for the page's banners)",
    replies={
        200: Reply("the state of the model and of the code runner", Status),
        400: Reply("`invalid_request`: `recheck` is neither 0 nor 1"),
    },
    params=(
        Param(
            "recheck",
            "query",
            {"type": "string", "enum": ["0", "1"]},
            "`1`: probe the providers again if their probe is older than `PROVIDER_RECHECK_S`",
        ),
    ),
)
def status() -> ResponseReturnValue:
    app_services = services()
    recheck = request.args.get("recheck", "0")
    if recheck not in ("0", "1"):
        raise ApiError(400, "invalid_request", "recheck must be 0 or 1")
    max_age_s = app_services.settings.provider_recheck_s if recheck == "1" else None
    report = app_services.provider_probe.report(max_age_s)
    judge = readiness().judge.get().value
    state = judge["state"]
    answer = Status(model=model_status(report), judge=JudgeStatus(state=state, message=JUDGE_MESSAGES[state]))
    return jsonify(answer.model_dump(mode="json"))
