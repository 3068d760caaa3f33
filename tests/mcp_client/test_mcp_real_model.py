"""A chat turn with the real llama.cpp model (SmolLM2-135M, `tests/llama_support.py`) and
mcp-server-time. Honest scope: SmolLM2-135M does not write `/time_get_current_time …` by itself
(its demonstrations show the first three kinds of tool, not this one), so the first pass is
scripted by a loopback proxy; every later pass goes to the real model, which reads the stored
`mcp_tools` result and writes the answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import new_token
from tests.llama_support import LlamaServer
from tests.mcp_client_support import real_server, write_servers

pytestmark = [pytest.mark.slow, pytest.mark.llm]
COMMAND = "/time_get_current_time Europe/Paris"


class FirstPassProxy:
    """Answers the first chat request with `COMMAND` (a stream of one piece), forwards the rest."""

    def __init__(self, upstream: str) -> None:
        self.requests: list[dict[str, Any]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                proxy.requests.append(body)
                if len(proxy.requests) == 1:
                    chunk = {"choices": [{"index": 0, "delta": {"content": COMMAND + "\n"}, "finish_reason": None}]}
                    data = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                answer = requests.post(upstream + self.path.removeprefix("/v1"), json=body, timeout=300)
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
def proxy(llama_server: LlamaServer) -> Iterator[FirstPassProxy]:
    running = FirstPassProxy(llama_server.base_url)
    yield running
    running.server.shutdown()


def test_the_real_model_answers_from_mcp_server_time(
    make_app: Any, llama_server: LlamaServer, proxy: FirstPassProxy, tmp_path: Path
) -> None:
    servers = write_servers(tmp_path, {"time": {"command": real_server("mcp-server-time")}})
    app = make_app(
        llm_provider="openai",
        llm_base_url=proxy.base_url,
        llm_model=llama_server.model,
        llm_timeout_s=120,
        mcp_servers=servers,
        prompt_demos=1,
    )
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    answer = app.test_client().post("/chat", json={"message": "What time is it in Paris?"}, headers=auth)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    body = answer.get_json()
    assert [m["role"] for m in body["messages"]][:2] == ["user", "mcp_tools"]
    tool = body["messages"][1]
    assert tool["meta"]["ok"] is True and tool["meta"]["output"]["structured"]["timezone"] == "Europe/Paris"
    assert body["messages"][-1]["role"] == "assistant" and body["reply"].strip()
    second = proxy.requests[1]  # the real model's pass: it was given the MCP result as data
    assert any("Europe/Paris" in str(m["content"]) and m["role"] != "system" for m in second["messages"])
    assert "/time_get_current_time <timezone>" in second["messages"][0]["content"]
