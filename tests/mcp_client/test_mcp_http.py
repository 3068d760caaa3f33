"""MCP client over streamable HTTP (SPEC 14), against a server written with the SDK's server side
(tests/mcp_http_support.py): results as data within the caps (images stored like uploads, an
error result, a flood), the SSRF rule for an untrusted loopback URL, a server that hangs,
dies or answers garbage costing one bounded failed call while another user's calls go on,
Stop cancelling a slow call (the server sees the cancellation; progress events reach the
turn's stream), and a tool added at run time appearing in `GET /tools`."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from api.services import services_of
from testing.waiting import wait_until
from tests.conftest import new_token
from tests.mcp_client_support import write_servers
from tests.mcp_http_support import HttpMcpServer


@pytest.fixture
def mcp_server() -> Iterator[HttpMcpServer]:
    with HttpMcpServer() as server:
        yield server


@pytest.fixture
def http_app(make_app: Any, fake_llm: Any, tmp_path: Path, mcp_server: HttpMcpServer) -> Flask:
    servers = write_servers(tmp_path, {"faults": {"url": mcp_server.url, "trusted": True, "timeout_s": 4}})
    # these turns test what a call's result becomes: the test server's tools say nothing, so
    # they would ask first (tests/api/test_approval_api.py); here they run at once
    app: Flask = make_app(
        llm_base_url=fake_llm.openai_base_url, mcp_servers=servers, prompt_demos=0, tool_approval="none"
    )
    return app


def auth_of(app: Flask, name: str = "mcp-user") -> dict[str, str]:
    return {"Authorization": f"Bearer {new_token(app, name)}"}


def call(app: Flask, auth: dict[str, str], name: str, body: dict[str, Any]) -> Any:
    return app.test_client().post(f"/tools/{name}", json=body, headers=auth)


def chat(app: Flask, auth: dict[str, str], fake_llm: Any, command: str) -> dict[str, Any]:
    fake_llm.queue(command, "Done.")
    answer: dict[str, Any] = app.test_client().post("/chat", json={"message": "go"}, headers=auth).get_json()
    return answer["messages"][1]


def test_http_tools_join_and_answer(http_app: Flask) -> None:
    auth = auth_of(http_app)
    answer = call(http_app, auth, "faults_echo", {"text": "hi"})
    assert answer.status_code == 200 and answer.get_json()["text"] == "echo: hi"


def test_calls_reuse_one_kept_alive_connection(make_app: Any, tmp_path: Path) -> None:
    """With a server that answers each POST with one JSON body; an answer sent as a stream of
    events is closed by the SDK once it has the result, and its connection with it."""
    with HttpMcpServer(json_response=True) as server:
        app: Flask = make_app(mcp_servers=write_servers(tmp_path, {"j": {"url": server.url, "trusted": True}}))
        auth = auth_of(app)
        assert call(app, auth, "j_echo", {"text": "first"}).status_code == 200
        before = len(server.observed.post_ports)
        for index in range(10):
            assert call(app, auth, "j_echo", {"text": str(index)}).get_json()["text"] == f"echo: {index}"
        assert len(set(server.observed.post_ports[before:])) == 1  # ten calls, one connection
        hub = services_of(app).mcp
        assert hub is not None
        hub.close()  # before the server stops


def test_an_image_is_stored_like_an_upload_and_named_in_the_text(http_app: Flask, fake_llm: Any) -> None:
    auth = auth_of(http_app)
    tool = chat(http_app, auth, fake_llm, "/faults_picture a fox")
    assert tool["meta"]["ok"] is True
    (image,) = tool["meta"]["output"]["images"]
    assert image["mime"] == "image/png" and (image["width"], image["height"]) == (8, 6)
    assert f"[image {image['url']} (image/png, 8x6)]" in tool["content"] and "a picture of a fox" in tool["content"]
    served = http_app.test_client().get(image["url"], headers=auth)
    assert served.status_code == 200 and served.data.startswith(b"\x89PNG")


def test_an_error_result_is_an_error(http_app: Flask, fake_llm: Any) -> None:
    tool = chat(http_app, auth_of(http_app), fake_llm, "/faults_broken why not")
    assert tool["meta"]["ok"] is False and tool["meta"]["code"] == "UPSTREAM_ERROR"
    assert "> Error: UPSTREAM_ERROR: Error executing tool broken: broken on purpose: why not" in tool["content"]


def test_a_flood_is_one_bounded_failed_call(http_app: Flask, fake_llm: Any) -> None:
    """Over 2026-07-28 (the test server speaks both eras) an answer is one JSON body, capped at
    8 MiB by `mcp_client/http.py`; over 2025-11-25 a stream of events, capped per event by the SDK."""
    auth = auth_of(http_app)
    tool = chat(http_app, auth, fake_llm, "/faults_flood now")
    assert len(tool["content"].encode()) <= 64 * 1024
    assert tool["meta"]["ok"] is False and tool["meta"]["code"] == "UPSTREAM_ERROR"
    hub = services_of(http_app).mcp
    assert hub is not None and hub.status()["faults"]["protocol"] == "2026-07-28"
    assert "larger than 8 MiB" in tool["meta"]["message"]
    assert call(http_app, auth, "faults_echo", {"text": "after"}).status_code == 200  # the session goes on


def test_garbage_and_a_hang_are_bounded_failed_calls_and_others_go_on(
    http_app: Flask, mcp_server: HttpMcpServer
) -> None:
    alice, bob = auth_of(http_app, "alice2"), auth_of(http_app, "bob2")
    garbage = call(http_app, alice, "faults_garbage", {"reason": "x"})
    assert garbage.status_code == 502 and garbage.get_json()["error"]["code"] == "UPSTREAM_ERROR"
    assert "Failed to parse JSON response" in garbage.get_json()["error"]["message"]
    results: dict[str, Any] = {}
    hanging = threading.Thread(
        target=lambda: results.update(hang=call(http_app, alice, "faults_hang", {"reason": "x"}))
    )
    hanging.start()
    wait_until(lambda: "hang" in mcp_server.observed.started, "the hanging call reached the server")
    other = call(http_app, bob, "faults_echo", {"text": "still here"})
    assert other.status_code == 200 and other.get_json()["text"] == "echo: still here"
    hanging.join(timeout=30)
    assert results["hang"].status_code == 504 and results["hang"].get_json()["error"]["code"] == "TIMEOUT"


def test_a_server_that_dies_costs_one_failed_call_and_is_reconnected(
    http_app: Flask, mcp_server: HttpMcpServer
) -> None:
    auth = auth_of(http_app)
    hub = services_of(http_app).mcp
    assert hub is not None
    mcp_server.stop()
    dead = call(http_app, auth, "faults_echo", {"text": "anyone?"})
    assert dead.status_code in (502, 504)
    mcp_server.start()
    wait_until(lambda: call(http_app, auth, "faults_echo", {"text": "back"}).status_code == 200, "a reconnection")
    assert hub.status()["faults"]["connected"]


def test_an_untrusted_loopback_url_is_refused_clearly(make_app: Any, tmp_path: Path, mcp_server: HttpMcpServer) -> None:
    servers = write_servers(tmp_path, {"faults": {"url": mcp_server.url}})
    app = make_app(mcp_servers=servers)
    hub = services_of(app).mcp
    assert hub is not None
    wait_until(lambda: hub.status()["faults"]["error"] is not None, "the refusal")
    status = hub.status()["faults"]
    assert status["connected"] is False and status["tools"] == []
    assert "127.0.0.1 is a loopback address" in status["error"] and '"trusted": true' in status["error"]
    assert mcp_server.observed.started == []


def test_stop_cancels_a_slow_call_and_progress_reaches_the_stream(
    http_app: Flask, fake_llm: Any, mcp_server: HttpMcpServer
) -> None:
    services = services_of(http_app)
    auth = auth_of(http_app)
    client = http_app.test_client()
    session_id = client.post("/sessions", json={}, headers=auth).get_json()["id"]
    fake_llm.queue('/faults_slow {"steps": 1000}', "never said")
    results: list[Any] = []
    thread = threading.Thread(
        target=lambda: results.append(
            http_app.test_client()
            .post("/chat", json={"message": "work", "session_id": session_id}, headers=auth)
            .get_json()
        )
    )
    thread.start()
    bus = services.live.bus

    def events(name: str) -> list[Any]:
        return [event for event in bus.read(session_id, 0).events if event.name == name]

    wait_until(lambda: len(events("tool.progress")) >= 2, "progress events")
    progress = events("tool.progress")[0]
    assert progress.data["name"] == "faults_slow" and progress.data["total"] == 1000
    assert progress.data["message"].startswith("step ")
    assert client.post(f"/sessions/{session_id}/cancel", headers=auth).status_code == 200
    thread.join(30)
    assert not thread.is_alive(), "the turn did not end after the cancel"
    body = results[0]
    assert body["stopped"] is True
    tool = next(m for m in body["messages"] if m["role"] == "mcp_tools")
    assert tool["meta"]["ok"] is False and tool["meta"]["code"] == "CANCELLED"
    wait_until(lambda: "slow" in mcp_server.observed.cancelled, "the server stopped the tool")  # SPEC 14: Stop cancels
    # over 2026-07-28 the SDK cancels by closing the call's request, without notifications/cancelled
    # (the 2025-11-25 notification: tests/mcp_client/test_mcp_http_faults.py, the late answer)


def test_a_tool_added_at_run_time_appears_in_get_tools(http_app: Flask, fake_llm: Any) -> None:
    auth = auth_of(http_app)
    client = http_app.test_client()
    before = json.loads(client.get("/openapi.json").get_data())["paths"]  # both built (and cached) before the change
    assert "/tools/faults_late_one" not in before
    fake_llm.queue("Hello.")
    client.post("/chat", json={"message": "hi"}, headers=auth)
    assert "/faults_late_one" not in fake_llm.requests[-1]["messages"][0]["content"]
    assert call(http_app, auth, "faults_grow", {"name": "late_one"}).status_code == 200

    def listed() -> set[str]:
        return {tool["function"]["name"] for tool in client.get("/tools", headers=auth).get_json()["tools"]}

    wait_until(lambda: "faults_late_one" in listed(), "the new tool in GET /tools")
    assert "/tools/faults_late_one" in json.loads(client.get("/openapi.json").get_data())["paths"]
    assert call(http_app, auth, "faults_late_one", {"word": "hi"}).get_json()["text"] == "late: hi"
    fake_llm.queue("Hello.")
    client.post("/chat", json={"message": "hi"}, headers=auth)
    assert "/faults_late_one <word>" in fake_llm.requests[-1]["messages"][0]["content"]
    fake_llm.queue("Hello.")
    v1 = client.post(
        "/v1/chat/completions",
        json={"model": "orchestrator", "messages": [{"role": "user", "content": "hi"}]},
        headers=auth,
    )
    assert v1.status_code == 200 and "/faults_late_one <word>" in fake_llm.requests[-1]["messages"][0]["content"]


def test_a_json_flood_stops_at_the_cap_and_the_session_goes_on(make_app: Any, tmp_path: Path) -> None:
    """A 20 MB answer in one JSON body: reading stops at 8 MiB (`mcp_client/http.py`), one failed call."""
    with HttpMcpServer(json_response=True) as server:
        app: Flask = make_app(mcp_servers=write_servers(tmp_path, {"j": {"url": server.url, "trusted": True}}))
        auth = auth_of(app)
        flood = call(app, auth, "j_flood", {"reason": "x"})
        assert flood.status_code == 502 and "larger than 8 MiB" in flood.get_json()["error"]["message"]
        assert call(app, auth, "j_echo", {"text": "after"}).get_json()["text"] == "echo: after"
        hub = services_of(app).mcp
        assert hub is not None
        hub.close()
