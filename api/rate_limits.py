"""Charging the per-user budgets of `RATE_LIMITS` (SPEC 12), and the 429 answer.

What a request spends is declared on its view with `@budget(...)` (`api/declare.py`), and
what a direct `POST /tools/<name>` spends on the tool (`Tool.budget`). The budgets:

- `turns`: `POST /chat` (a retry too: it calls the model again), `POST /api/ai/tool-result`
  (a widget's answer runs the model's next pass) and `POST /v1/chat/completions`; asked for as
  a stream by a user who already holds `MAX_STREAMS_PER_USER` streams, any of them is refused
  first (429, no turn spent); direct calls of the tools that reach a model or the web.
- `runs`: `POST /run`, `POST /submit`, and direct calls of `run_code` and the task `submit`.
- `generate`: `POST /activities/generate`.
- `sessions`: every request that creates a chat session (`POST /sessions`, a `POST /chat`,
  `POST /v1/chat/completions` or `POST /activities/generate` without a session); charged by
  the view, which knows (`new_session` in `api/sessions.py`).
- `imports`: `POST /sessions/import` (which also spends one `sessions`).
- `login`: `POST /api/login`, charged by the view: see `api/auth.py` for its two keys.

A budget declared as charged is spent by `charge_endpoint`, once the request is
authenticated and before its body is read: a refused one costs the server one lookup. Over
budget the answer is 429 `rate_limited` with `Retry-After` (seconds until the moving window
lets one more through) and `details: {limit, retry_after_s}`.
"""

from __future__ import annotations

from flask import Flask, current_app, request

from api.auth import current_user, require_user
from api.declare import budget_of
from api.live import stream_seat, wants_event_stream
from api.refusal import refuse_unless
from api.services import services
from live.limits import RateLimiter, StreamSeats


def init_app(app: Flask) -> None:
    """The hook that charges endpoints (the limiter and the stream slots are in `Services`)."""
    app.before_request(charge_endpoint)


def charged_budget() -> str | None:
    """The budget the request being dispatched spends before its view runs, as its view declares."""
    if request.endpoint is None:  # no route matched: a 404 or 405 on its way
        return None
    declared = budget_of(current_app.view_functions.get(request.endpoint))
    return None if declared is None else declared.charged_for(request.view_args)


def charge_endpoint() -> None:
    limit = charged_budget()
    if limit is not None:
        require_user()  # the app's hooks run before the blueprint's; 401 comes first
        if limit == "turns" and wants_event_stream():
            stream_seat()  # a turn to be streamed to a user holding every stream they may: 429, nothing spent
        charge(limit)


def limiter() -> RateLimiter:
    return services().rate_limiter


def charge(limit: str) -> None:
    """Spend one of the current user's `limit` budget, or answer 429 if it is spent."""
    refuse_unless(limiter().hit(limit, str(current_user().id)))


def stream_slots() -> StreamSeats:
    return services().stream_slots
