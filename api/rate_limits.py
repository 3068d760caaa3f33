"""Which requests spend which per-user budget of `RATE_LIMITS` (SPEC 12), and the 429 answer.

One table says which endpoint costs what, so every limited route is listed here:

- `turns`: `POST /chat` (a retry too: it calls the model again) and `POST /api/ai/tool-result`
  (a widget's answer runs the model's next pass); asked for as a stream by a user who already
  holds `MAX_STREAMS_PER_USER` streams, either is refused first (429, no turn spent); direct calls of the tools that reach a
  model or the web (`POST /tools/<name>`, `TOOL_LIMITS`).
- `runs`: `POST /run`, `POST /submit`, and direct calls of `run_code` and the task `submit`.
- `generate`: `POST /activities/generate`.
- `sessions`: every request that creates a chat session (`POST /sessions`, a `POST /chat` or
  `POST /activities/generate` without `session_id`); charged by the view, which knows.
- `login`: `POST /api/login`, see `api/auth.py` for its two keys.

A request is counted once it is authenticated, before its body is read: a refused one costs
the server one lookup. Over budget the answer is 429 `rate_limited` with `Retry-After`
(seconds until the moving window lets one more through) and `details: {limit, retry_after_s}`.
"""

from __future__ import annotations

from flask import Flask, request

from api.auth import current_user, require_user
from api.live import stream_seat, wants_event_stream
from api.refusal import refuse_unless
from api.services import services
from live.limits import RateLimiter, StreamSlots

ENDPOINT_LIMITS: dict[str, str] = {
    "chat.chat": "turns",
    "tool_results.tool_result": "turns",
    "openai.chat_completions": "turns",  # POST /v1/chat/completions (its 429 in OpenAI's shape)
    "judge.run": "runs",
    "judge.submit": "runs",
    "judge.generate": "generate",
}
TOOL_LIMITS: dict[str, str] = {  # POST /tools/<name>: what a direct call of the tool costs
    "run_code": "runs",
    "submit": "runs",
    "imagine": "turns",
    "image_analyze": "turns",
    "web_search": "turns",
    "open_url": "turns",
    "weather": "turns",
}


def init_app(app: Flask) -> None:
    """The hook that charges endpoints (the limiter and the stream slots are in `Services`)."""
    app.before_request(charge_endpoint)


def limit_for(endpoint: str | None, view_args: dict[str, object] | None) -> str | None:
    if endpoint == "tools.call":
        return TOOL_LIMITS.get(str((view_args or {}).get("name")))
    return ENDPOINT_LIMITS.get(endpoint or "")


def charge_endpoint() -> None:
    limit = limit_for(request.endpoint, request.view_args)
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


def stream_slots() -> StreamSlots:
    return services().stream_slots
