"""The 429 answer of a per-user limit (SPEC 4): `{"error": {"code": "rate_limited", …}}` with
`Retry-After`, the same from a view (`refuse`) and from the event loop (`refusal_body`)."""

from __future__ import annotations

from typing import NoReturn

from flask import abort, jsonify

from api.services import services
from live.limits import Verdict


def refusal_body(verdict: Verdict) -> dict[str, object]:
    what = "open event streams" if verdict.limit == "streams" else verdict.limit
    message = f"too many {what} (at most {verdict.rule}); retry in {verdict.retry_after_s} s"
    return {
        "error": {
            "code": "rate_limited",
            "message": message,
            "details": {"limit": verdict.limit, "retry_after_s": verdict.retry_after_s},
        }
    }


def refuse_unless(verdict: Verdict) -> None:
    if not verdict.allowed:
        refuse(verdict)


def refuse(verdict: Verdict) -> NoReturn:
    """Answer 429 now. Raised as a finished response (the JSON error handler cannot add the
    Retry-After header); it still passes every `after_request` hook like any other answer."""
    services().telemetry.rate_limited(verdict.limit)
    response = jsonify(refusal_body(verdict))
    response.status_code = 429
    response.headers["Retry-After"] = str(verdict.retry_after_s)
    abort(response)
