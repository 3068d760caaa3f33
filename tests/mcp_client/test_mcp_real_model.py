"""Chat turns with the real llama.cpp model (SmolLM2-135M, `tests/llama_support.py`) calling
real MCP servers (mcp-server-time, mcp-server-git) through the text protocol: the model writes
the command line itself, the backend runs the MCP tool and stores `mcp_tools`, and the model
writes the answer from that result.

The product sends no sampling settings, so llama.cpp samples at its default temperature and a
135M model's first line varies from turn to turn (bench/README.md: 5 of 6 turns wrote the
command, 1 of 6 with a valid time zone). A loopback proxy between the product and the model
pins `temperature: 0` on every request and changes nothing else, so the model's choice is
repeatable; everything it writes is its own. With `LLM_GRAMMAR=first_line` (the grammar
offers the MCP commands, SPEC 7a) and a user message that names the command and its argument,
greedy decoding writes that command line."""

from __future__ import annotations

import fcntl
import json
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import new_token
from tests.llama_support import LlamaServer
from tests.mcp_client_support import git_repo, real_server, write_servers

pytestmark = [pytest.mark.slow, pytest.mark.llm]


class GreedyProxy:
    """Forwards each chat request to the real model with `temperature: 0`; keeps the bodies."""

    def __init__(self, upstream: str) -> None:
        self.requests: list[dict[str, Any]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                proxy.requests.append(body)
                answer = requests.post(
                    upstream + self.path.removeprefix("/v1"), json={**body, "temperature": 0}, timeout=300
                )
                self.send_response(answer.status_code)
                self.send_header("Content-Type", answer.headers.get("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def proxy(llama_server: LlamaServer) -> Iterator[GreedyProxy]:
    running = GreedyProxy(llama_server.base_url)
    yield running
    running.server.shutdown()


@contextmanager
def fixed_repository() -> Iterator[Path]:
    """A one-commit repository at the same short path on every run, held under a lock.

    The prompt must be the same bytes on every run for greedy decoding to repeat. With a random
    `mkdtemp` name and the path in mid-sentence ("Use /git_status PATH to show me …"), SmolLM2
    copied the rest of the sentence into the command for some names (`repo4dbu7i8_`), and the
    tool took those words as its path; with the path ending the message it stops after the path
    (the probe is in bench/README.md, "The test suite's length")."""
    root = Path(tempfile.gettempdir())
    with (root / "mcp-git-test.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test session on this machine waits its turn
        home = root / "mcp-git"
        shutil.rmtree(home, ignore_errors=True)
        try:
            yield git_repo(home / "repo")
        finally:
            shutil.rmtree(home, ignore_errors=True)


def chat_with_real_model(
    make_app: Any, llama_server: LlamaServer, proxy: GreedyProxy, servers: Path, message: str, demos: int = 1
):
    app = make_app(
        llm_provider="openai",
        llm_base_url=proxy.base_url,
        llm_model=llama_server.model,
        llm_timeout_s=120,
        mcp_servers=servers,
        prompt_demos=demos,
        llm_grammar="first_line",
        llm_decide="greedy",  # what the greedy proxy measures: the text as the model samples it
        tool_approval="none",
    )
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    answer = app.test_client().post("/chat", json={"message": message}, headers=auth)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.get_json()


def test_the_real_model_calls_mcp_server_time_and_answers_from_its_result(
    make_app: Any, llama_server: LlamaServer, proxy: GreedyProxy, tmp_path: Path
) -> None:
    servers = write_servers(tmp_path, {"time": {"command": real_server("mcp-server-time")}})
    message = "Use /time_get_current_time Europe/Paris to tell me the current time in Paris."
    body = chat_with_real_model(make_app, llama_server, proxy, servers, message)
    assert [m["role"] for m in body["messages"]] == ["user", "mcp_tools", "assistant"]
    tool = body["messages"][1]
    assert "$ /time_get_current_time Europe/Paris" in tool["content"]
    assert tool["meta"]["ok"] is True and tool["meta"]["output"]["structured"]["timezone"] == "Europe/Paris"
    assert body["reply"].strip()
    first, second = proxy.requests  # the model's own two passes: the command, then the answer
    assert "grammar" in first and "time_get_current_time" in first["grammar"]
    assert any("Europe/Paris" in str(m["content"]) and m["role"] != "system" for m in second["messages"][1:])


def test_the_real_model_calls_mcp_server_git_on_a_repository(
    make_app: Any, llama_server: LlamaServer, proxy: GreedyProxy, tmp_path: Path
) -> None:
    git = {"command": real_server("mcp-server-git"), "allow": ["git_status", "git_log"], "prefix": ""}
    servers = write_servers(tmp_path, {"git": git})
    with fixed_repository() as repo:
        # the command alone: after a sentence, this 135M model goes on writing prose on the
        # command's line since the demonstrations alternate with plain answers (measured 2026-12-02)
        message = f"/git_status {repo}"
        body = chat_with_real_model(make_app, llama_server, proxy, servers, message)
    assert [m["role"] for m in body["messages"]] == ["user", "mcp_tools", "assistant"]
    tool = body["messages"][1]
    assert f"$ /git_status {repo}\n" in tool["content"] and tool["meta"]["ok"] is True
    assert "nothing to commit" in tool["content"]  # git's own words for the one-commit repository
    assert body["reply"].strip()
