"""A real server process for the `/mcp` tests, and the official MCP client SDK pointed at it.

`McpServer` starts `python app.py` on a free port with a loopback web fake behind
`/web_search` (SearXNG's JSON), `/weather` (Open-Meteo's) and `/open_url` (`/page`), the example course imported
(the learner-task tools), the admin (alice) and a second user (bob) with their tokens. `session(url, token)` is the SDK's streamable-HTTP client and
`ClientSession`, initialized.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from testing.fake_web import FakeWebServer, Page
from tests.process_support import ROOT, clean_env, free_port, run_app, stop_process, wait_until_serving

SEARXNG = {
    "query": "mars rover",
    "results": [
        {"url": "https://en.wikipedia.org/wiki/Mars_rover", "title": "Mars rover", "content": "A rover on Mars."},
        {"url": "https://science.nasa.gov/mission/mars-2020", "title": "Perseverance", "content": "NASA's rover."},
    ],
}
PARIS = {"id": 2988507, "name": "Paris", "latitude": 48.85, "longitude": 2.35, "country": "France", "admin1": "IdF"}
FORECAST = {
    "timezone": "Europe/Paris",
    "current_units": {"temperature_2m": "°C", "wind_speed_10m": "km/h", "precipitation": "mm"},
    "current": {
        "time": "2025-06-01T14:15",
        "temperature_2m": 21.4,
        "relative_humidity_2m": 48,
        "apparent_temperature": 20.6,
        "precipitation": 0.0,
        "weather_code": 2,
        "wind_speed_10m": 11.2,
    },
    "daily": {
        "time": ["2025-06-01", "2025-06-02", "2025-06-03"],
        "weather_code": [2, 61, 95],
        "temperature_2m_max": [23.1, 19.8, 25.0],
        "temperature_2m_min": [13.2, 12.9, 15.5],
        "precipitation_sum": [0.0, 4.3, 12.1],
        "precipitation_probability_max": [10, 70, 85],
    },
}


TASK = "<the first ready task>"  # `good_arguments` puts the id `get_ready` answers in its place
PAGE = "<the web fake's page>"
#: good arguments for every tool `/mcp` lists (a new tool fails the tests that use this until it
#: is here), in an order that works: the file written before it is edited, the task started
#: before it is submitted
GOOD: dict[str, dict[str, Any]] = {
    "weather": {"place": "Paris"},
    "remember": {"fact": "alice drinks green tea", "importance": 3},
    "web_search": {"query": "mars rover"},
    "memory_search": {"query": "green tea"},
    "open_url": {"url": PAGE},
    "memory_sql": {"sql": "SELECT content FROM memories"},
    "write_file": {"path": "notes/plan.txt", "content": "step one\nstep two\n"},
    "edit_file": {"path": "notes/plan.txt", "edits": "<<<<<<< SEARCH\nstep two\n=======\nstep 2\n>>>>>>> REPLACE"},
    "read_file": {"path": "notes/plan.txt", "start_line": 1, "end_line": 2},
    "list_files": {"glob": "notes/*"},
    "search_files": {"pattern": "step", "file_glob": "*.txt"},
    "run_code": {"language": "python", "code": "print(6 * 7)"},
    "get_ready": {"limit": 5},
    "show_task": {"task_id": TASK},
    "get_context": {"task_id": TASK},
    "start_task": {"task_id": TASK},
    "submit": {"task_id": TASK, "answer": "print('Hello, world!')"},
    "add_comment": {"task_id": TASK, "text": "alice's note"},
    "get_comments": {"task_id": TASK, "limit": 5},
    "go_back": {"task_id": TASK, "reason": "I want to read it again"},
    "request_help": {"task_id": TASK, "message": "I am stuck on the loop"},
}
#: good arguments whose call still fails with `JUDGE_ENABLED=0`, and its code (None: the learner
#: tools' own): nothing is graded, so no task is closed for `go_back` to reopen
FAILS_WITH_THE_JUDGE_OFF: dict[str, str | None] = {
    "run_code": "NOT_CONFIGURED",
    "submit": None,
    "go_back": "INVALID_STATE",
}


def good_arguments(name: str, task_id: str, page_url: str) -> dict[str, Any]:
    """`GOOD[name]` with the task and the page filled in."""
    return {key: {TASK: task_id, PAGE: page_url}.get(value, value) for key, value in GOOD[name].items()}


def web_fake() -> FakeWebServer:
    def as_json(value: object) -> Page:
        return Page(json.dumps(value), content_type="application/json")

    page = Page("<html><head><title>Rovers</title></head><body><p>A rover drives on Mars.</p></body></html>")
    return FakeWebServer(
        {
            "/search": as_json(SEARXNG),
            "/geo": as_json({"results": [PARIS]}),
            "/forecast": as_json(FORECAST),
            "/page": page,
        }
    )


@dataclass(frozen=True)
class McpServer:
    base_url: str
    alice: str  # the admin's token
    bob: str
    web: FakeWebServer
    log: Path
    process: subprocess.Popen[Any]

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def url(self) -> str:
        return f"{self.base_url}/mcp"


@contextmanager
def mcp_server(tmp: Path, **settings: str) -> Iterator[McpServer]:
    """A server process with the web fake and two users; `settings` are extra environment."""
    base: dict[str, object] = {
        "database_path": tmp / "app.db",
        "data_dir": tmp / "data",
        "auth_token_file": tmp / "admin.token",
    }
    with web_fake() as web:
        port = free_port()
        defaults = {
            "PORT": str(port),
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": "http://127.0.0.1:9/v1",
            "LLM_MODEL": "m",
            "SEARCH_URL": web.base_url,
            "WEATHER_URL": web.url("/forecast"),
            "GEOCODING_URL": web.url("/geo"),
            "ALLOW_PRIVATE_FETCH": "1",
        }
        env = clean_env(tmp, base, **{**defaults, **settings})
        made = run_app(env, "create-user", "bob")
        assert made.returncode == 0, made.stderr
        bob = made.stdout.strip().splitlines()[-1]
        course = run_app(env, "import-tasks", str(ROOT / "examples" / "tasks" / "intro_python.yaml"))
        assert course.returncode == 0, course.stderr
        log_path = tmp / "server.log"
        log = log_path.open("w")
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_serving(process, f"http://127.0.0.1:{port}/health/live", log_path)
            alice = (tmp / "admin.token").read_text().strip()
            yield McpServer(f"http://127.0.0.1:{port}", alice, bob, web, log_path, process)
        finally:
            stop_process(process, log)


@asynccontextmanager
async def session(url: str, token: str) -> AsyncIterator[ClientSession]:
    """The official SDK's client, initialized, with `Authorization: Bearer <token>`."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def structured(result: Any) -> dict[str, Any]:
    """A call result's `structuredContent` (present on every successful answer of ours)."""
    assert result.structured_content is not None, result
    value: dict[str, Any] = result.structured_content
    return value


def error_of(result: Any) -> dict[str, Any]:
    """A failed call's error, `{"code", "message", "details"?}`: the result has `isError` and no
    `structuredContent` (`{"error": …}` would not match the tool's output schema), and its text
    is the `Error: <code>: <message>` line, then the JSON error body."""
    assert result.is_error is True and result.structured_content is None, result
    line, body = (block.text for block in result.content)
    error: dict[str, Any] = json.loads(body)["error"]
    assert line == f"Error: {error['code']}: {error['message']}"
    return error


def asgi_post(endpoint: Any, token: str, body: bytes) -> list[dict[str, Any]]:
    """One JSON-RPC POST to an in-process `/mcp` endpoint (`mcp_server.endpoint.McpEndpoint`)
    with the user's bearer token: the ASGI messages it sent back."""
    from tests.async_support import run_async

    async def scenario() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        headers = [
            (b"host", b"localhost"),
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json, text/event-stream"),
        ]
        scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers, "query_string": b""}
        async with endpoint.running():
            await endpoint(scope, receive, send)
        return sent

    return run_async(scenario)
