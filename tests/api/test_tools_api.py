"""`GET /tools` and `POST /tools/<name>`: schemas derived from input models, direct calls."""

from __future__ import annotations

import threading

from api.services import services_of
from bounded.jobs import Job, Kind, Limits
from testing.waiting import wait_until
from tests.conftest import new_token

TEST_KIND = Kind("test", ("tests.bounded_jobs",), memory_mb=64, site_packages=False)


def test_tools_lists_openai_function_schemas_for_every_tool(app, client, auth):
    body = client.get("/tools", headers=auth).get_json()
    registry = services_of(app).turns.registry
    names = [entry["function"]["name"] for entry in body["tools"]]
    assert names == [tool.name for tool in registry]
    for entry, tool in zip(body["tools"], registry, strict=True):
        assert entry["type"] == "function"
        assert entry["function"]["description"] == tool.description
        assert entry["function"]["parameters"] == tool.input_model.model_json_schema()
        assert entry["function"]["parameters"]["type"] == "object"


def test_tools_need_auth(client):
    assert client.get("/tools").status_code == 401
    assert client.post("/tools/remember", json={"fact": "x"}).status_code == 401


def test_direct_call_returns_the_output_model(client, auth):
    response = client.post("/tools/remember", json={"fact": "likes jazz", "importance": 3}, headers=auth)
    assert response.status_code == 200
    assert response.get_json() == {"id": 1, "content": "likes jazz", "already_known": False}
    found = client.post("/tools/memory_search", json={"query": "jazz"}, headers=auth).get_json()
    assert found["hits"][0]["source"] == "memory" and "**jazz**" in found["hits"][0]["snippet"]


def test_direct_call_is_scoped_to_the_caller(app, client, auth):
    client.post("/tools/remember", json={"fact": "secret of alice"}, headers=auth)
    bob = {"Authorization": f"Bearer {new_token(app, 'bob')}"}
    assert client.post("/tools/memory_search", json={"query": "secret"}, headers=bob).get_json()["hits"] == []
    rows = client.post("/tools/memory_sql", json={"sql": "SELECT content FROM memories"}, headers=bob).get_json()
    assert rows["rows"] == []


def test_direct_call_errors_use_the_tool_codes(client, auth):
    cases = [
        ("/tools/remember", {}, 400, "VALIDATION_FAILED"),
        ("/tools/remember", {"fact": "x", "extra": 1}, 400, "VALIDATION_FAILED"),
        ("/tools/memory_sql", {"sql": "SELECT * FROM sqlite_master"}, 403, "PERMISSION_DENIED"),
        ("/tools/imagine", {"prompt": "a cat on a mat"}, 503, "NOT_CONFIGURED"),
        ("/tools/nope", {}, 404, "not_found"),
    ]
    for path, body, status, code in cases:
        response = client.post(path, json=body, headers=auth)
        assert response.status_code == status, path
        assert response.get_json()["error"]["code"] == code
    bad = client.post("/tools/remember", data="not json", headers={**auth, "Content-Type": "application/json"})
    assert bad.status_code == 400 and bad.get_json()["error"]["code"] == "invalid_json"


def test_direct_call_errors_are_written_for_a_person(client, auth):
    """Over HTTP the message says what is wrong and `details` names each field; the model's
    usage line and "Fix the command" stay in the chat contract."""
    body = client.post("/tools/remember", json={"importance": "high"}, headers=auth).get_json()["error"]
    assert body["code"] == "VALIDATION_FAILED"
    assert body["message"].startswith("invalid arguments for remember: fact: Field required")
    assert "Usage" not in body["message"] and "Fix the command" not in body["message"]
    assert {problem["field"] for problem in body["details"]} == {"fact", "importance"}
    assert all(set(problem) == {"field", "message"} for problem in body["details"])
    missing_judge = client.post("/tools/run_code", json={"language": "python", "code": "print(1)"}, headers=auth)
    assert missing_judge.status_code == 503
    assert "instead" not in missing_judge.get_json()["error"]["message"]


def test_direct_call_names_at_most_twenty_wrong_fields(client, auth):
    junk = {f"{'k' * 500}{index}": index for index in range(5_000)}
    error = client.post("/tools/remember", json={"fact": "x", **junk}, headers=auth).get_json()["error"]
    assert error["code"] == "VALIDATION_FAILED" and len(error["details"]) == 20
    assert all(len(problem["field"]) <= 101 for problem in error["details"])


def test_the_chat_contract_keeps_the_models_hint(client, auth, fake_llm):
    fake_llm.queue("/remember", "Sorry.")
    stored = client.post("/chat", json={"message": "remember nothing"}, headers=auth).get_json()["messages"][1]
    assert "> Error: VALIDATION_FAILED: invalid arguments for remember: fact: Field required." in stored["content"]
    assert (
        "Usage: /remember &lt;fact&gt;" in stored["content"] and "Fix the command and try again." in stored["content"]
    )
    assert "Usage" not in stored["meta"]["message"]


def test_every_direct_call_spends_a_budget(make_app, fake_llm):
    """SPEC 12: `memory_sql` and `search_files` too (the `tools` budget), 429 with Retry-After beyond it."""
    app = make_app(llm_base_url=fake_llm.openai_base_url, rate_limits="tools=2/minute")
    client, alice = app.test_client(), {"Authorization": f"Bearer {new_token(app, 'alice')}"}
    calls = [("/tools/memory_sql", {"sql": "SELECT 1"}), ("/tools/search_files", {"pattern": "x"})]
    for path, body in calls:
        assert client.post(path, json=body, headers=alice).status_code == 200
    for path, body in calls:
        refused = client.post(path, json=body, headers=alice)
        assert refused.status_code == 429, path
        assert refused.get_json()["error"]["details"]["limit"] == "tools" and int(refused.headers["Retry-After"]) >= 1
    bob = {"Authorization": f"Bearer {new_token(app, 'bob')}"}
    assert client.post("/tools/memory_sql", json={"sql": "SELECT 1"}, headers=bob).status_code == 200  # bob's own


def test_a_busy_worker_pool_answers_503_with_retry_after(make_app, fake_llm, tmp_path):
    """Every sandbox worker is held by another user's job: a direct call gives up at its deadline
    as 503 `busy` with Retry-After (never a 500), and runs once the worker is free."""
    app = make_app(llm_base_url=fake_llm.openai_base_url, sandbox_workers=1)
    client, alice = app.test_client(), {"Authorization": f"Bearer {new_token(app, 'alice')}"}
    pool, log = services_of(app).bounded, tmp_path / "starts"
    held = Job("tests.bounded_jobs:mark_then_wait", {"log": str(log), "tag": "held"})
    holder = threading.Thread(target=pool.run, args=(TEST_KIND, held, Limits(wall_s=30.0)), kwargs={"user": 999})
    holder.start()
    try:
        wait_until(lambda: log.exists() and log.read_text() == "held\n", "the holding job never started")
        for path, body in [("/tools/memory_sql", {"sql": "SELECT 1"}), ("/tools/search_files", {"pattern": "x"})]:
            response = client.post(path, json=body, headers=alice)
            assert response.status_code == 503, response.get_data(as_text=True)
            assert response.get_json()["error"]["code"] == "busy" and "busy" in response.get_json()["error"]["message"]
            assert int(response.headers["Retry-After"]) >= 1
    finally:
        (tmp_path / "starts.held.go").touch()
        holder.join(30)
    assert client.post("/tools/memory_sql", json={"sql": "SELECT 1"}, headers=alice).status_code == 200
