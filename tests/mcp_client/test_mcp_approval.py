"""Approval (SPEC 8) with a real MCP server from PyPI (mcp-server-git as a stdio child): a
tool its server does not call read-only (`git_add`) asks first and changes nothing before the
user says yes; one it calls read-only (`git_status`) runs at once; `TOOL_APPROVAL` lets an
operator run a tool at once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from api.services import services_of
from tests.conftest import new_token
from tests.mcp_client_support import git_repo, real_server, write_servers


def staged(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "diff", "--cached", "--name-only"], check=True, capture_output=True, text=True
    )
    return out.stdout.split()


def test_git_add_asks_first_and_git_status_does_not(make_app: Any, fake_llm: Any, tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    (repo / "new.txt").write_text("new\n")
    servers = write_servers(
        tmp_path,
        {
            "git": {
                "command": real_server("mcp-server-git"),
                "args": ["--repository", str(repo)],
                "prefix": "",
                "allow": ["git_status", "git_add"],
            }
        },
    )
    app = make_app(llm_base_url=fake_llm.openai_base_url, mcp_servers=servers, prompt_demos=0)
    client = app.test_client()
    auth = {"Authorization": f"Bearer {new_token(app, 'git-user')}"}
    add = "/git_add " + json.dumps({"repo_path": str(repo), "files": ["new.txt"]})
    fake_llm.queue(add, "Staged new.txt.")
    pending = client.post("/chat", json={"message": "stage new.txt"}, headers=auth).get_json()["messages"][-1]
    assert pending["role"] == "ui_tools" and pending["meta"]["output"]["widget"] == "approval"
    assert pending["meta"]["command_line"] == add
    assert staged(repo) == []  # nothing ran
    body = {
        "conversationId": pending["session_id"],
        "toolCallId": pending["meta"]["tool_call_id"],
        "toolName": "git_add",
        "targetField": "approval",
        "value": True,
    }
    answered = client.post("/api/ai/tool-result", json=body, headers=auth).get_json()
    assert answered["messages"][0]["role"] == "mcp_tools" and answered["messages"][0]["meta"]["approval"] == "approved"
    assert staged(repo) == ["new.txt"] and answered["reply"] == "Staged new.txt."
    # git_status is annotated read-only by its server: it runs at once
    assert services_of(app).turns.registry.get("git_status").annotations.read_only  # type: ignore[union-attr]
    fake_llm.queue(f"/git_status {repo}", "One file staged.")
    status = client.post("/chat", json={"message": "status?"}, headers=auth).get_json()
    assert [m["role"] for m in status["messages"]] == ["user", "mcp_tools", "assistant"]
    assert "new.txt" in status["messages"][1]["content"]


def test_an_operator_lets_a_tool_run_at_once(make_app: Any, fake_llm: Any, tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "repo")
    (repo / "new.txt").write_text("new\n")
    git = {
        "command": real_server("mcp-server-git"),
        "args": ["--repository", str(repo)],
        "prefix": "",
        "allow": ["git_add"],
    }
    servers = write_servers(tmp_path, {"git": git})
    app = make_app(
        llm_base_url=fake_llm.openai_base_url, mcp_servers=servers, prompt_demos=0, tool_approval="default,-git_add"
    )
    auth = {"Authorization": f"Bearer {new_token(app, 'git-user')}"}
    fake_llm.queue("/git_add " + json.dumps({"repo_path": str(repo), "files": ["new.txt"]}), "Staged.")
    answer = app.test_client().post("/chat", json={"message": "stage it"}, headers=auth).get_json()
    assert [m["role"] for m in answer["messages"]] == ["user", "mcp_tools", "assistant"]
    assert staged(repo) == ["new.txt"]
