"""MCP client (SPEC 14) against real servers from PyPI run as stdio children: mcp-server-time
and mcp-server-git. Their tools join the registry and are used in a chat turn (the fake model
writes the command), over `GET /tools`, `POST /tools/<name>`, `/openapi.json` and `/v1`; the
child is supervised (restarted when killed) and gone once the app is closed."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import requests

from api.services import services_of
from config.settings import ConfigError
from testing.hostile import running_server
from testing.waiting import wait_until
from tests.conftest import new_token
from tests.mcp_client_support import git_repo, marked, processes_with, real_server, write_servers


@pytest.fixture
def time_app(make_app, fake_llm, tmp_path):
    mark, env = marked()
    servers = write_servers(tmp_path, {"time": {"command": real_server("mcp-server-time"), "env": env}})
    app = make_app(llm_base_url=fake_llm.openai_base_url, mcp_servers=servers, prompt_demos=0)
    app.config["mcp_mark"] = mark
    return app


def auth_of(app) -> dict[str, str]:
    return {"Authorization": f"Bearer {new_token(app, 'mcp-user')}"}


def test_a_chat_turn_calls_mcp_server_time(time_app, fake_llm):
    client, auth = time_app.test_client(), auth_of(time_app)
    fake_llm.queue("/time_get_current_time Europe/Paris", "It is evening in Paris.")
    answer = client.post("/chat", json={"message": "what time is it in Paris?"}, headers=auth).get_json()
    _user, tool, assistant = answer["messages"]
    assert tool["role"] == "mcp_tools"
    assert "$ /time_get_current_time Europe/Paris" in tool["content"]
    assert tool["meta"]["ok"] is True
    assert tool["meta"]["output"]["structured"]["timezone"] == "Europe/Paris"
    assert '>   "timezone": "Europe/Paris",' in tool["content"]
    assert assistant == {**assistant, "role": "assistant", "content": "It is evening in Paris."}
    first, second = fake_llm.requests[-2:]
    system = first["messages"][0]["content"]
    assert "/time_get_current_time <timezone>: Get current time in a specific timezone" in system
    assert "Example: /time_get_current_time America/New_York" in system  # from the schema's description
    assert any("Europe/Paris" in str(m["content"]) for m in second["messages"] if m["role"] != "system")


def test_an_mcp_error_result_is_an_error_and_a_wrong_call_names_the_field(time_app, fake_llm):
    client, auth = time_app.test_client(), auth_of(time_app)
    fake_llm.queue("/time_get_current_time Mars/Olympus", "Sorry.")
    tool = client.post("/chat", json={"message": "time on Mars"}, headers=auth).get_json()["messages"][1]
    assert tool["meta"]["ok"] is False and tool["meta"]["code"] == "UPSTREAM_ERROR"
    assert "> Error: UPSTREAM_ERROR: Error executing tool get_current_time: Invalid timezone" in tool["content"]
    fake_llm.queue('/time_convert_time {"source_timezone": "Europe/Paris", "time": 1300}', "Sorry.")
    tool = client.post("/chat", json={"message": "convert"}, headers=auth).get_json()["messages"][1]
    assert tool["meta"]["code"] == "VALIDATION_FAILED"
    assert "target_timezone: Field required" in tool["content"] and "time: 1300 is not of type" in tool["content"]
    assert "Usage: /time_convert_time {" in tool["content"]  # the expected shape, generated from the schema


def test_mcp_tools_are_listed_callable_and_documented_like_built_in_ones(time_app, fake_llm):
    client, auth = time_app.test_client(), auth_of(time_app)
    names = [tool["function"]["name"] for tool in client.get("/tools", headers=auth).get_json()["tools"]]
    assert {"time_get_current_time", "time_convert_time", "weather"} <= set(names)
    direct = client.post("/tools/time_get_current_time", json={"timezone": "Asia/Tokyo"}, headers=auth)
    assert direct.status_code == 200 and direct.get_json()["structured"]["timezone"] == "Asia/Tokyo"
    wrong = client.post("/tools/time_get_current_time", json={"zone": "x"}, headers=auth)
    assert wrong.status_code == 400 and wrong.get_json()["error"]["code"] == "VALIDATION_FAILED"
    document = json.loads(client.get("/openapi.json").get_data())
    body = document["paths"]["/tools/time_get_current_time"]["post"]["requestBody"]["content"]["application/json"]
    name = body["schema"]["$ref"].rsplit("/", 1)[1]
    assert document["components"]["schemas"][name]["required"] == ["timezone"]
    fake_llm.queue("/time_get_current_time Europe/Paris", "Evening.")
    v1 = client.post(
        "/v1/chat/completions",
        json={"model": "orchestrator", "messages": [{"role": "user", "content": "time in Paris?"}]},
        headers=auth,
    )
    assert v1.status_code == 200, v1.get_data(as_text=True)
    assert "Evening." in v1.get_json()["choices"][0]["message"]["content"]
    assert "/time_get_current_time" in fake_llm.requests[-2]["messages"][0]["content"]


def test_annotations_are_kept_on_the_tool(time_app):
    tool = services_of(time_app).turns.registry.get("time_get_current_time")
    assert tool is not None and tool.annotations is not None
    assert tool.annotations.read_only is True and tool.annotations.destructive is False
    assert tool.result_role == "mcp_tools"


def test_mcp_server_git_on_a_temporary_repository(make_app, fake_llm, tmp_path):
    repo = git_repo(tmp_path / "repo")
    servers = write_servers(
        tmp_path,
        {
            "git": {
                "command": real_server("mcp-server-git"),
                "args": ["--repository", str(repo)],
                "prefix": "",  # its tools are already called git_…
                "allow": ["git_log", "git_status", "git_show"],
            }
        },
    )
    app = make_app(llm_base_url=fake_llm.openai_base_url, mcp_servers=servers, prompt_demos=0)
    registry = services_of(app).turns.registry
    assert {t.name for t in registry.group("mcp:git")} == {"git_log", "git_status", "git_show"}
    assert registry.get("git_commit") is None  # not allowed
    fake_llm.queue(f"/git_log {repo}", "One commit so far.")
    answer = app.test_client().post("/chat", json={"message": "git history?"}, headers=auth_of(app)).get_json()
    tool = answer["messages"][1]
    assert tool["role"] == "mcp_tools" and tool["meta"]["ok"] is True
    assert "Message: first commit" in tool["content"]
    assert answer["reply"] == "One commit so far."


def test_a_killed_child_is_restarted_and_a_closed_app_leaves_none(time_app):
    mark = time_app.config["mcp_mark"]
    hub = services_of(time_app).mcp
    assert hub is not None
    first = processes_with(mark)
    assert first, "the server's child runs"
    for pid in first:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: hub.status()["time"]["connected"] and hub.status()["time"]["starts"] == 2, "a restart")
    second = processes_with(mark)
    assert second and not set(second) & set(first)
    auth = auth_of(time_app)
    direct = time_app.test_client().post("/tools/time_get_current_time", json={"timezone": "UTC"}, headers=auth)
    assert direct.status_code == 200
    services_of(time_app).close()
    assert processes_with(mark) == []


def test_a_wrong_servers_file_stops_the_start_naming_the_field(make_app, tmp_path):
    bad = write_servers(tmp_path, {"time": {"command": "x", "args": "not a list"}})
    with pytest.raises(ConfigError, match=r"mcpServers\.time\.args: Input should be a valid list"):
        make_app(mcp_servers=bad)


def test_no_servers_file_means_no_hub(app):
    assert services_of(app).mcp is None


def test_the_real_server_stops_its_children_on_sigterm(tmp_path: Path) -> None:
    """`python app.py` (uvicorn) as an operator runs it: SIGTERM leaves no MCP child behind."""
    mark, env = marked()
    servers = write_servers(tmp_path, {"time": {"command": real_server("mcp-server-time"), "env": env}})
    with running_server(tmp_path / "server", {"MCP_SERVERS": servers}) as server:
        assert processes_with(mark), "the server started its MCP child"
        tools = requests.get(f"{server.base}/tools", headers=server.auth(server.admin_token), timeout=10).json()
        assert "time_get_current_time" in {tool["function"]["name"] for tool in tools["tools"]}
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
    assert processes_with(mark) == []
