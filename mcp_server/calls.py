"""The blocking half of `/mcp`: who a token belongs to, and one tool call, on worker threads.

Both run inside the Flask app's context, so the request's database connection (`get_db`) and
the app's services are the ones every HTTP request uses, released when the context ends. A
call spends the tool's `Tool.budget` of `RATE_LIMITS`, then runs `api.tools.direct_call`: the
budget, the runner, the scope and the caps of `POST /tools/<name>`, only the answer's shape
differs (`mcp_server/listing.py`). A dependency that fails (the database, Redis) is the same
503 code as over HTTP (`api.errors.dependency_refusal`), as a result or an answer. Over budget is an `isError` result with the code
`rate_limited` and its retry delay: the MCP transport has no per-call status, and a model
reading the result can wait and retry, as it would after a 429.

`FairThreads` runs these calls off the event loop on at most `threads` threads, and no user
holds more than half of them: another user's call always finds a thread, however many calls
one host sends at once (their excess waits on the loop, which costs no thread). The wait is
bounded too: a user with `QUEUED_PER_THREAD * threads` calls already running or waiting gets
`BUSY` at once (SPEC 12's "busy", never a 500), so one host's burst cannot pile up requests,
each holding its body, without end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from flask import Flask

from api.database import get_db
from api.errors import dependency_refusal
from api.refusal import refusal_body
from api.services import services
from api.tools import direct_call
from foundation.fair_share import Busy
from mcp_server.listing import call_result, error_result
from storage.users import User, user_for_token
from tools.base import Tool

T = TypeVar("T")
log = logging.getLogger("mcp_server")
QUEUED_PER_THREAD = 4  # a user's calls running or waiting, per call thread of the process


def user_of(app: Flask, token: str) -> User | None:
    """The user whose API token this is (the tokens of the HTTP API, SPEC 3)."""
    with app.app_context():
        return user_for_token(get_db(), token)


def call(app: Flask, tool: Tool[Any, Any], arguments: dict[str, Any], user_id: int) -> types.CallToolResult:
    """One `tools/call` by user `user_id`, as `POST /tools/<name>` runs it."""
    with app.app_context():
        found = services()
        try:
            if tool.budget is not None:
                verdict = found.rate_limiter.hit(tool.budget, str(user_id))
                if not verdict.allowed:
                    found.telemetry.rate_limited(verdict.limit)
                    error: dict[str, Any] = refusal_body(verdict)["error"]  # type: ignore[assignment]
                    return error_result("rate_limited", error["message"], error["details"])
            return call_result(direct_call(tool, arguments, user_id))
        except Exception as failure:  # the runner catches the tool's own; this is the budget's store
            refusal = dependency_refusal(failure)
            if refusal is None:
                raise
            log.warning("MCP call of %s refused: %s", tool.name, failure)
            return error_result(refusal.code, refusal.message)


class FairThreads:
    """At most `threads` blocking calls at once, at most half of them (at least one) per user.

    Built on the event loop (anyio's primitives belong to one), in the endpoint's lifespan."""

    def __init__(self, threads: int) -> None:
        self.limiter = anyio.CapacityLimiter(threads)
        self.share = max(1, threads // 2)
        self.most_queued = QUEUED_PER_THREAD * threads
        self._users: dict[int, tuple[anyio.Semaphore, list[int]]] = {}  # user -> (their places, [callers])

    def in_flight(self, user_id: int) -> int:
        """Calls of this user running or waiting (for tests and metrics)."""
        entry = self._users.get(user_id)
        return 0 if entry is None else entry[1][0]

    async def run(self, user_id: int, work: Callable[[], T]) -> T:
        """`work()` on a call thread; raises `Busy` when this user has too many calls queued."""
        entry = self._users.get(user_id)
        if entry is None:
            entry = self._users[user_id] = (anyio.Semaphore(self.share), [0])
        places, callers = entry
        if callers[0] >= self.most_queued:
            raise Busy(f"{callers[0]} of your MCP calls are already running or waiting; retry when they are done")
        callers[0] += 1
        try:
            async with places:
                return await anyio.to_thread.run_sync(work, limiter=self.limiter)
        finally:
            callers[0] -= 1
            if callers[0] == 0:
                del self._users[user_id]
