"""`GET /openapi.json` and `GET /docs`: a valid OpenAPI 3.1 document of every route, whose
schemas the real answers match (spot checks here; every operation is fuzzed in
`tests/api/test_openapi_fuzz.py`)."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from api.declare import UNDOCUMENTED, OneOperationPerTool, Reply, budget, budget_of, operation, operation_of
from api.instructor import MAX_ROW_ID
from api.openapi.document import DocumentError, build_document, openapi_path
from api.services import services_of
from storage.users import create_user
from testing.fake_llm import FakeLLMServer


@pytest.fixture
def document(client: FlaskClient) -> dict[str, Any]:
    response = client.get("/openapi.json")  # no token: the document is public
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    return response.get_json()


def declared_schema(
    document: dict[str, Any], path: str, method: str, status: int, media: str = "application/json"
) -> dict[str, Any]:
    answer = document["paths"][path][method]["responses"][str(status)]
    return {**answer["content"][media]["schema"], "components": document["components"]}


def assert_matches(document: dict[str, Any], path: str, method: str, status: int, body: Any) -> None:
    schema = declared_schema(document, path, method, status)
    errors = [
        f"{list(error.absolute_path)}: {error.message}" for error in Draft202012Validator(schema).iter_errors(body)
    ]
    assert errors == [], f"{method.upper()} {path} {status}: {errors}"


# ------------------------------------------------------------------------------- the document


def test_the_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    assert document["openapi"] == "3.1.0"
    validate(document)  # raises on any violation of the OpenAPI 3.1 meta-schema


def test_every_route_declares_its_operation_and_is_documented(app: Flask, document: dict[str, Any]) -> None:
    operation_ids = {op["operationId"] for item in document["paths"].values() for op in item.values()}
    for rule in app.url_map.iter_rules():
        if rule.endpoint in UNDOCUMENTED:
            continue
        declared = operation_of(app.view_functions[rule.endpoint])
        assert declared is not None, f"{rule.rule} ({rule.endpoint}) declares no @operation"
        if not isinstance(declared, OneOperationPerTool):  # the tools' operations: the next tests
            assert rule.endpoint in operation_ids, rule.rule


def test_a_new_route_without_a_declaration_stops_the_document(app: Flask) -> None:
    app.add_url_rule("/surprise", "surprise", lambda: "hi")
    with pytest.raises(DocumentError, match="/surprise"):
        build_document(app)


def test_a_new_route_is_documented_from_its_own_declarations(app: Flask) -> None:
    @operation("A surprise", replies={200: Reply("hi", media=("text/plain",))})
    @budget("turns")
    def surprise() -> str:
        return "hi"

    app.add_url_rule("/surprise", "surprise", surprise, methods=["POST"])
    operation_object = build_document(app)["paths"]["/surprise"]["post"]
    assert (operation_object["operationId"], operation_object["summary"]) == ("surprise", "A surprise")
    assert {"200", "401", "403", "429"} == set(operation_object["responses"])  # what follows from the app's rules


def test_every_tool_is_one_operation_with_its_own_models(app: Flask, document: dict[str, Any]) -> None:
    registry = services_of(app).turns.registry
    assert len(registry) > 10
    for tool in registry:
        operation = document["paths"][f"/tools/{tool.name}"]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        output = operation["responses"]["200"]["content"]["application/json"]["schema"]
        components = document["components"]["schemas"]
        assert components[body["$ref"].split("/")[-1]]["title"] == tool.input_model.__name__
        assert components[output["$ref"].split("/")[-1]]["title"] == tool.output_model.__name__
        assert ("429" in operation["responses"]) == (tool.budget is not None), tool.name


def test_every_operation_that_spends_a_budget_declares_429_with_retry_after(
    app: Flask, document: dict[str, Any]
) -> None:
    limited = 0
    for rule in app.url_map.iter_rules():
        view = app.view_functions[rule.endpoint]
        if budget_of(view) is None or isinstance(operation_of(view), OneOperationPerTool):
            continue
        path, _ = openapi_path(rule)
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            operation = document["paths"][path][method.lower()]
            assert "Retry-After" in operation["responses"]["429"]["headers"], rule.endpoint
            limited += 1
    assert limited >= 8  # chat, tool results, /v1 completions, run, submit, generate, sessions, login


def test_routes_become_paths_with_typed_parameters(document: dict[str, Any]) -> None:
    messages = document["paths"]["/sessions/{session_id}/messages"]["get"]
    assert [(p["name"], p["in"], p["schema"]["type"]) for p in messages["parameters"]] == [
        ("session_id", "path", "string"),
        ("limit", "query", "integer"),
        ("before", "query", "integer"),
        ("tree", "query", "integer"),
    ]
    resolve = document["paths"]["/help-requests/{request_id}/resolve"]["post"]["parameters"][0]
    assert resolve["schema"] == {"type": "integer", "minimum": 0, "maximum": MAX_ROW_ID}
    assert document["paths"]["/health"]["get"]["security"] == []
    assert document["paths"]["/sessions"]["get"]["security"] == [{"bearerAuth": []}, {"cookieAuth": []}]
    stream = document["paths"]["/sessions/{session_id}/generate/stream"]["get"]["responses"]["200"]["content"]
    assert list(stream) == ["text/event-stream"]


# ------------------------------------------------------------------------------- the page


def test_the_reference_page_loads_with_its_script(client: FlaskClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    assert page.mimetype == "text/html"
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    html = page.get_data(as_text=True)
    assert '<script src="/static/docs.js"' in html and "<script>" not in html  # no inline script under the CSP
    script = client.get("/static/docs.js")
    assert script.status_code == 200
    assert 'fetch("/openapi.json")' in script.get_data(as_text=True)


# ------------------------------------------------------------------------------- real answers match


def test_a_chat_turn_and_its_session_match_their_schemas(
    client: FlaskClient, auth: dict[str, str], fake_llm: FakeLLMServer, document: dict[str, Any]
) -> None:
    fake_llm.queue("Hello there.")
    turn = client.post("/chat", json={"message": "hi"}, headers=auth)
    assert turn.status_code == 200
    body = turn.get_json()
    assert_matches(document, "/chat", "post", 200, body)
    assert body["tool"] is None and "meta" not in body["messages"][0]  # the wire as before
    assert set(body["messages"][1]["meta"]) == {"answered_by"}  # added: the model that wrote the answer
    session_id = body["session_id"]
    for path, concrete in (
        ("/sessions/{session_id}", f"/sessions/{session_id}"),
        ("/sessions/{session_id}/messages", f"/sessions/{session_id}/messages"),
        ("/sessions", "/sessions"),
        ("/api/me", "/api/me"),
        ("/api/profile", "/api/profile"),
        ("/tools", "/tools"),
        ("/activities", "/activities"),
    ):
        answer = client.get(concrete, headers=auth)
        assert answer.status_code == 200, concrete
        assert_matches(document, path, "get", 200, answer.get_json())
    missing = client.get("/sessions/nope", headers=auth)
    assert missing.status_code == 404
    assert_matches(document, "/sessions/{session_id}", "get", 404, missing.get_json())


def test_health_matches_its_schema(client: FlaskClient, document: dict[str, Any]) -> None:
    answer = client.get("/health")
    assert answer.status_code == 200
    assert_matches(document, "/health", "get", 200, answer.get_json())


def test_the_openai_answers_match_their_schemas(
    client: FlaskClient, auth: dict[str, str], fake_llm: FakeLLMServer, document: dict[str, Any]
) -> None:
    assert_matches(document, "/v1/models", "get", 200, client.get("/v1/models", headers=auth).get_json())
    fake_llm.queue("Hi from the orchestrator.")
    completion = client.post(
        "/v1/chat/completions",
        headers=auth,
        json={"model": "orchestrator", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert completion.status_code == 200
    assert_matches(document, "/v1/chat/completions", "post", 200, completion.get_json())
    refused = client.post("/v1/chat/completions", headers=auth, json={"model": "other", "messages": []})
    assert refused.status_code == 400
    assert_matches(document, "/v1/chat/completions", "post", 400, refused.get_json())


def test_tool_outputs_and_task_tool_errors_match_their_schemas(
    client: FlaskClient, auth: dict[str, str], document: dict[str, Any]
) -> None:
    stored = client.post("/tools/remember", json={"fact": "I like tea"}, headers=auth)
    assert stored.status_code == 200, stored.get_data(as_text=True)
    assert_matches(document, "/tools/remember", "post", 200, stored.get_json())
    missing = client.post("/tools/show_task", json={"task_id": "no-such-task"}, headers=auth)
    assert missing.status_code == 404, missing.get_data(as_text=True)
    assert missing.get_json()["success"] is False
    assert_matches(document, "/tools/show_task", "post", 404, missing.get_json())


def test_an_answer_that_breaks_its_schema_is_caught(document: dict[str, Any]) -> None:
    """The spot checks can fail: a session without `active_turn` does not match."""
    schema = declared_schema(document, "/sessions/{session_id}", "get", 200)
    session = {"id": "s", "name": "n", "created_at": "t", "updated_at": "t"}
    assert not Draft202012Validator(schema).is_valid(session)
    assert Draft202012Validator(schema).is_valid({**session, "active_turn": None})


# ------------------------------------------------------------------------------- what the fuzzer found


@pytest.mark.parametrize("path", ["/help-requests/{id}/resolve", "/task-reviews/{id}"])
def test_an_id_beyond_sqlite_integers_is_404_not_500(app: Flask, client: FlaskClient, path: str) -> None:
    with services_of(app).database.connection() as conn:
        _, token = create_user(conn, "staff", role="instructor")
    url = path.format(id=MAX_ROW_ID + 1)
    answer = client.post(url, json={"passed": True}, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 404
    assert answer.get_json()["error"]["code"] == "not_found"
    in_range = client.post(
        path.format(id=MAX_ROW_ID), json={"passed": True}, headers={"Authorization": f"Bearer {token}"}
    )
    assert in_range.status_code == 404  # a valid id that names nothing: the view's own 404


def test_answers_that_name_a_session_link_to_the_operations_on_it(document: dict[str, Any]) -> None:
    created = document["paths"]["/sessions"]["post"]["responses"]["201"]["links"]
    assert created["sessions.show"] == {
        "operationId": "sessions.show",
        "parameters": {"session_id": "$response.body#/id"},
    }
    operation_ids = {op["operationId"] for item in document["paths"].values() for op in item.values()}
    turn = document["paths"]["/chat"]["post"]["responses"]["200"]["links"]
    assert set(turn) <= operation_ids and turn["sessions.messages"]["parameters"] == {
        "session_id": "$response.body#/session_id"
    }


def test_profile_field_names_are_constrained_in_the_schema_as_in_validation(
    client: FlaskClient, auth: dict[str, str], document: dict[str, Any]
) -> None:
    """Found by the fuzzer: the schema let any key through (`patternProperties` alone), the API did not."""
    body = {"fields": {"0": 1}}
    schema = {
        **document["paths"]["/api/profile"]["patch"]["requestBody"]["content"]["application/json"]["schema"],
        "components": document["components"],
    }
    assert not Draft202012Validator(schema).is_valid(body)
    assert client.patch("/api/profile", json=body, headers=auth).status_code == 400
    assert Draft202012Validator(schema).is_valid({"fields": {"city": "Paris"}})


def test_a_v1_chunk_stream_is_text_events_and_a_turn_stream_json_events(document: dict[str, Any]) -> None:
    """`/v1`'s stream ends with `data: [DONE]`, not JSON; a turn's `done` event carries the turn's answer."""
    chunks = document["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]["text/event-stream"]
    assert chunks["schema"]["properties"]["data"] == {"type": "string"} and "then" not in chunks["schema"]
    turn = document["paths"]["/chat"]["post"]["responses"]["200"]["content"]["text/event-stream"]["schema"]
    assert turn["then"]["properties"]["data"]["contentSchema"] == {"$ref": "#/components/schemas/TurnAnswer"}
