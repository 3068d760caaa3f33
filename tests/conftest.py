"""Shared fixtures: a fresh app and database per test, a loopback fake LLM, no internet.

`make_app(**overrides)` builds an app from `Settings` whose paths all live in the test's
tmp dir. Tokens come from the real user-creation code. Any socket connection to a
non-loopback address fails, so no test can reach the internet by accident.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api.services import services_of
from app import create_app
from config.settings import Settings
from storage.users import create_user
from testing.fake_llm import FakeLLMServer
from testing.network_guard import loopback_only

pytest_plugins = [
    "tests.ui_support",  # browser fixtures (real server, chromium), module-scoped
    "tests.judge_support",  # `nothing_left`: no judge container outlives a test
    "tests.llama_support",  # `llama_server`: llama.cpp serving SmolLM2-135M, session-scoped
    "tests.pg_support",  # `pg_cluster`: a private PostgreSQL server, session-scoped
    "tests.redis_support",  # `redis_server` (session) and `redis_url` (emptied per test): a private redis-server
    "tests.otlp_support",  # `receiver`: a loopback OTLP/HTTP receiver of spans
]


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", loopback_only)


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def base_settings(tmp_path: Path) -> dict[str, Any]:
    return {
        "database_path": str(tmp_path / "app.db"),
        "data_dir": str(tmp_path / "data"),
        "auth_token_file": str(tmp_path / "admin.token"),
        "llm_provider": "openai",
        "llm_base_url": "http://127.0.0.1:9/v1",
        "llm_model": "test-model",
        "llm_timeout_s": 5,
        "prompt_demos": 0,  # tests of the context's exact shape; tests/pipeline/test_demos.py turns them on
        "judge_enabled": False,  # judge tests turn it on; no app reaps containers mid-test
        "judge_pool_size": 0,  # a pool per test app would start containers for nothing
    }


@pytest.fixture
def make_app(base_settings: dict[str, Any]) -> Iterator[Callable[..., Flask]]:
    built: list[Flask] = []

    def build(**overrides: Any) -> Flask:
        app = create_app(Settings(**{**base_settings, **overrides}))
        app.config["TESTING"] = True
        built.append(app)
        return app

    yield build
    for app in built:
        services = services_of(app)
        if services.mcp is not None:
            services.mcp.close()  # MCP servers' children and sessions (SPEC 14)
        services.live.close()  # a Redis backend's listener thread and connections (nothing in-process)
        services.database.close()  # a PostgreSQL pool, whose workers would otherwise go on
        # reconnecting to the test's dropped database and log into later tests


@pytest.fixture
def scripted(tmp_path: Path) -> Callable[[Any], str]:
    """Write a scripted-replies file and return its path."""

    def write(replies: Any) -> str:
        path = tmp_path / f"script-{len(list(tmp_path.glob('script-*')))}.json"
        path.write_text(json.dumps(replies), encoding="utf-8")
        return str(path)

    return write


@pytest.fixture
def app(make_app: Callable[..., Flask], fake_llm: FakeLLMServer) -> Flask:
    return make_app(llm_base_url=fake_llm.openai_base_url)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def new_token(app: Flask, name: str = "alice") -> str:
    with services_of(app).database.connection() as conn:
        _, token = create_user(conn, name)
    return token


@pytest.fixture
def token(app: Flask) -> str:
    return new_token(app)


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
