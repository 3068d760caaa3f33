"""A dependency that fails under `/mcp` answers the HTTP API's 503 codes, never a 500 (SPEC 12).

In-process (the endpoint's ASGI app on a test app): the database failing to say whose a token
is, and Redis failing under a call's budget, are injected where they happen.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from api.services import services_of
from mcp_server.calls import call
from mcp_server.endpoint import McpEndpoint
from storage.errors import StorageUnavailable
from tests.conftest import new_token
from tests.mcp_support import asgi_post, error_of

LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'


def post(endpoint: McpEndpoint, token: str) -> list[dict[str, Any]]:
    return asgi_post(endpoint, token, LIST)


def test_a_database_that_cannot_say_whose_the_token_is_answers_503(make_app, monkeypatch) -> None:
    endpoint = McpEndpoint(make_app(), threads=2)

    def unreachable(*_: object) -> None:
        raise StorageUnavailable("disk I/O error", "SQLITE_IOERR")

    monkeypatch.setattr("mcp_server.endpoint.user_of", unreachable)
    start, body = post(endpoint, "any-token")
    assert start["status"] == 503
    assert json.loads(body["body"])["error"]["code"] == "storage_unavailable"


def test_redis_failing_under_a_calls_budget_is_an_error_result(make_app, monkeypatch) -> None:
    app = make_app()
    new_token(app)
    limiter = services_of(app).rate_limiter

    def no_answer(*_: object) -> None:
        raise redis.ConnectionError("Redis is down")

    monkeypatch.setattr(limiter, "hit", no_answer)
    tool = services_of(app).turns.registry.get("list_files")
    assert tool is not None
    result = call(app, tool, {}, 1)
    assert error_of(result)["code"] == "live_state_unavailable"


def test_a_token_answers_when_the_database_does(make_app) -> None:
    app = make_app()
    start, body = post(McpEndpoint(app, threads=2), new_token(app))
    assert start["status"] == 200
    assert "memory_search" in {tool["name"] for tool in json.loads(body["body"])["result"]["tools"]}
