"""Per-user limits (SPEC 12): RATE_LIMITS parsed at start-up, the moving-window budgets, which
endpoint spends which budget, the 429 answer, and MAX_STREAMS_PER_USER open streams.

The hostile versions (floods against the real server, with a bystander) are in
test_hostile_limits.py.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from flask import Flask

from api.declare import budget_of
from api.rate_limits import charged_budget
from api.services import services_of
from config.settings import ConfigError, Rate, RateLimits, load_settings
from live.limits import RateLimiter, StreamSlots
from testing.hostile import running_server
from testing.waiting import HUNG_S
from tests.conftest import new_token

# RATE_LIMITS -----------------------------------------------------------------------------------


def test_defaults_hold_every_key_sessions_included():
    limits = load_settings({}, dotenv_path=None).rate_limits
    assert limits.turns == Rate(count=30, window_s=60, text="30/minute")
    assert (limits.runs.count, limits.generate.window_s, limits.login.count) == (60, 3600, 10)
    assert limits.sessions == Rate(count=60, window_s=3600, text="60/hour")


@pytest.mark.parametrize(
    "text,key,count,window_s",
    [
        ("turns=5/second", "turns", 5, 1),
        ("runs = 7 per hour", "runs", 7, 3600),
        ("generate=2/10 minutes", "generate", 2, 600),
        ("login=3/DAY", "login", 3, 86400),
        ("sessions=100/2 hours,", "sessions", 100, 7200),
    ],
)
def test_a_rate_names_its_key_and_the_rest_keep_their_defaults(text, key, count, window_s):
    limits = load_settings({"RATE_LIMITS": text}, dotenv_path=None).rate_limits
    rate = getattr(limits, key)
    assert (rate.count, rate.window_s) == (count, window_s)
    defaults = load_settings({}, dotenv_path=None).rate_limits
    assert all(
        getattr(limits, other) == getattr(defaults, other) for other in type(limits).model_fields if other != key
    )


def test_off_means_unlimited():
    assert load_settings({"RATE_LIMITS": "turns=off"}, dotenv_path=None).rate_limits.turns is None


@pytest.mark.parametrize(
    "text,named",
    [
        ("streams=5/minute", "streams"),
        ("turns=5/fortnight", "turns"),
        ("turns=0/minute", "turns"),
        ("turns=5/0 minutes", "turns"),
        ("turns=many", "turns"),
        ("turns", "turns"),
        ("login=", "login"),
    ],
)
def test_an_unknown_key_or_a_bad_rate_is_a_config_error_naming_it(text, named):
    with pytest.raises(ConfigError) as raised:
        load_settings({"RATE_LIMITS": text}, dotenv_path=None)
    assert "RATE_LIMITS" in str(raised.value) and named in str(raised.value)


# the budgets themselves ------------------------------------------------------------------------


def limiter(text: str) -> RateLimiter:
    return RateLimiter(load_settings({"RATE_LIMITS": text}, dotenv_path=None).rate_limits)


def test_a_budget_allows_its_count_then_refuses_with_the_wait():
    budget = limiter("turns=3/minute")
    assert [budget.hit("turns", "1").allowed for _ in range(4)] == [True, True, True, False]
    refused = budget.hit("turns", "1")
    assert not refused.allowed and refused.limit == "turns" and refused.rule == "3/minute"
    assert 1 <= refused.retry_after_s <= 60
    assert budget.hit("turns", "2").allowed  # another user has a budget of their own
    assert budget.hit("runs", "1").allowed  # and so has every other action


def test_a_refused_hit_is_not_counted_and_off_always_allows():
    budget = limiter("turns=1/second,runs=off")
    assert budget.hit("turns", "1").allowed
    assert not any(budget.hit("turns", "1").allowed for _ in range(50))
    time.sleep(1.05)  # had the refusals counted, the window would still be full
    assert budget.hit("turns", "1").allowed
    assert all(budget.hit("runs", "1").allowed for _ in range(1000))


def test_the_window_moves():
    budget = limiter("turns=2/second")
    assert budget.hit("turns", "1").allowed and budget.hit("turns", "1").allowed
    assert not budget.hit("turns", "1").allowed
    time.sleep(1.05)
    assert budget.hit("turns", "1").allowed


def test_stream_slots_count_open_streams_per_user():
    slots = StreamSlots(per_user=2)
    assert slots.take(1).allowed and slots.take(1).allowed
    refused = slots.take(1)
    assert not refused.allowed and refused.limit == "streams" and refused.retry_after_s >= 1
    assert slots.take(2).allowed
    slots.give_back(1)
    assert slots.held(1) == 1 and slots.take(1).allowed
    for _ in range(2):
        slots.give_back(1)
    assert slots.held(1) == 0 and slots.room(1).allowed


# which endpoint spends what --------------------------------------------------------------------


def test_every_declared_budget_is_a_rate_limits_key(app: Flask):
    keys = set(RateLimits.model_fields)
    for endpoint, view in app.view_functions.items():
        declared = budget_of(view)
        if declared is not None:
            assert declared.charged is None or callable(declared.charged) or declared.charged in keys, endpoint
            assert set(declared.by_view) <= keys, endpoint
    for tool in services_of(app).turns.registry:
        assert tool.budget is None or tool.budget in keys, tool.name


@pytest.mark.parametrize(
    "method,path,spent",
    [
        ("POST", "/chat", "turns"),
        ("POST", "/api/ai/tool-result", "turns"),
        ("POST", "/v1/chat/completions", "turns"),
        ("POST", "/run", "runs"),
        ("POST", "/submit", "runs"),
        ("POST", "/activities/generate", "generate"),
        ("POST", "/tools/run_code", "runs"),
        ("POST", "/tools/submit", "runs"),
        ("POST", "/tools/RUN_CODE", "runs"),  # the registry's names are case-insensitive, so is the price
        *(("POST", f"/tools/{name}", "turns") for name in ("imagine", "image_analyze", "web_search", "open_url")),
        ("POST", "/tools/weather", "turns"),
        ("POST", "/tools/remember", "tools"),  # every direct tool call spends a budget (SPEC 12)
        ("POST", "/tools/no_such_tool", None),  # a 404, free
        ("POST", "/sessions", None),  # `sessions` is spent by the view, only when it creates one
        ("POST", "/api/login", None),  # `login` too, under its own keys
        ("GET", "/sessions", None),
        ("GET", "/no/such/route", None),
    ],
)
def test_which_request_spends_which_budget_before_its_view(app: Flask, method: str, path: str, spent: str | None):
    with app.test_request_context(path, method=method):  # routed: `request.endpoint` is set
        assert charged_budget() == spent


@pytest.fixture
def limited(make_app: Callable[..., Flask], fake_llm) -> Flask:
    return make_app(
        llm_base_url=fake_llm.openai_base_url,
        rate_limits="turns=2/minute,runs=2/minute,generate=1/hour,sessions=3/hour,login=2/minute",
        max_streams_per_user=2,
        trace_enabled=True,
    )


def assert_refused(response, limit: str) -> None:
    assert response.status_code == 429, response.get_data(as_text=True)
    assert 1 <= int(response.headers["Retry-After"]) <= 3600
    error = response.get_json()["error"]
    assert error["code"] == "rate_limited" and limit in error["message"]
    assert error["details"] == {"limit": limit, "retry_after_s": int(response.headers["Retry-After"])}


def test_turns_are_limited_per_user(limited: Flask):
    client, alice, bob = limited.test_client(), new_token(limited, "alice"), new_token(limited, "bob")
    session = client.post("/sessions", json={}, headers=auth(alice)).get_json()["id"]
    for _ in range(2):
        assert (
            client.post("/chat", json={"message": "hi", "session_id": session}, headers=auth(alice)).status_code == 200
        )
    refused = client.post("/chat", json={"message": "hi", "session_id": session}, headers=auth(alice))
    assert_refused(refused, "turns")
    messages = client.get(f"/sessions/{session}/messages", headers=auth(alice)).get_json()["messages"]
    assert len(messages) == 4  # the refused turn stored nothing
    assert client.post("/chat", json={"message": "hi"}, headers=auth(bob)).status_code == 200


def test_runs_and_submits_share_one_budget_and_direct_run_code_spends_it(limited: Flask):
    client, alice = limited.test_client(), new_token(limited, "alice")
    body = {"language": "python", "files": {"main.py": "print(1)"}}
    assert client.post("/run", json=body, headers=auth(alice)).status_code == 503  # the judge is off here
    assert client.post("/submit", json={**body, "problem_id": "p"}, headers=auth(alice)).status_code == 404
    assert_refused(client.post("/run", json=body, headers=auth(alice)), "runs")
    assert_refused(
        client.post("/tools/run_code", json={"language": "python", "code": "print(1)"}, headers=auth(alice)), "runs"
    )
    assert_refused(  # tool names are case-insensitive: another spelling is the same tool at the same price
        client.post("/tools/RUN_CODE", json={"language": "python", "code": "print(1)"}, headers=auth(alice)), "runs"
    )
    remembered = client.post("/tools/remember", json={"fact": "I like tea"}, headers=auth(alice))
    assert remembered.status_code != 429  # it spends the `tools` budget, not `runs`


def test_generation_is_limited(limited: Flask):
    client, alice = limited.test_client(), new_token(limited, "alice")
    body = {"topic": "loops", "language": "python"}
    assert client.post("/activities/generate", json=body, headers=auth(alice)).status_code == 503
    assert_refused(client.post("/activities/generate", json=body, headers=auth(alice)), "generate")


def test_every_way_of_creating_a_session_spends_the_sessions_budget(limited: Flask):
    client, alice = limited.test_client(), new_token(limited, "alice")
    assert client.post("/sessions", json={}, headers=auth(alice)).status_code == 201
    assert client.post("/chat", json={"message": "hi"}, headers=auth(alice)).status_code == 200
    session = client.post("/sessions", json={}, headers=auth(alice)).get_json()["id"]
    assert_refused(client.post("/sessions", json={}, headers=auth(alice)), "sessions")
    # a turn in an existing session creates none and goes through
    assert client.post("/chat", json={"message": "hi", "session_id": session}, headers=auth(alice)).status_code == 200
    assert len(client.get("/sessions", headers=auth(alice)).get_json()["sessions"]) == 3


def test_an_unauthenticated_request_is_401_and_spends_nothing(limited: Flask):
    client, alice = limited.test_client(), new_token(limited, "alice")
    for _ in range(5):
        assert client.post("/chat", json={"message": "hi"}).status_code == 401
    assert client.post("/chat", json={"message": "hi"}, headers=auth(alice)).status_code == 200


def test_every_answer_carries_nosniff_a_refusal_included(limited: Flask):
    client, alice = limited.test_client(), new_token(limited, "alice")
    for _ in range(3):
        response = client.post("/sessions", json={}, headers=auth(alice))
        assert response.headers["X-Content-Type-Options"] == "nosniff"


# open streams ----------------------------------------------------------------------------------


def test_open_streams_are_capped_and_a_closed_one_frees_its_seat(limited: Flask):
    """Under a plain WSGI server (the test client) the seat is given back when the server
    closes the response. (Streams held in one thread must close in reverse order here:
    each keeps its request context pushed.)"""
    client, alice, bob = limited.test_client(), new_token(limited, "alice"), new_token(limited, "bob")
    session = client.post("/sessions", json={}, headers=auth(alice)).get_json()["id"]
    trace = f"/sessions/{session}/trace"
    held = [client.get(trace, headers=auth(alice), buffered=False) for _ in range(2)]
    assert [response.status_code for response in held] == [200, 200]
    assert_refused(client.get(trace, headers=auth(alice)), "streams")
    bob_session = client.post("/sessions", json={}, headers=auth(bob)).get_json()["id"]
    other = client.get(f"/sessions/{bob_session}/trace", headers=auth(bob), buffered=False)
    assert other.status_code == 200, other.get_data(as_text=True)  # another user's streams are their own
    other.close()
    held.pop().close()
    again = client.get(trace, headers=auth(alice), buffered=False)
    assert again.status_code == 200
    again.close()
    held.pop().close()
    assert services_of(limited).stream_slots.held(2) == 0


def test_a_streamed_chat_at_the_cap_is_refused_before_its_turn_starts(limited: Flask):
    client, alice = limited.test_client(), new_token(limited, "alice")
    session = client.post("/sessions", json={}, headers=auth(alice)).get_json()["id"]
    held = [client.get(f"/sessions/{session}/trace", headers=auth(alice), buffered=False) for _ in range(2)]
    refused = client.post(
        "/chat", json={"message": "hi", "session_id": session}, headers={**auth(alice), "Accept": "text/event-stream"}
    )
    assert_refused(refused, "streams")
    assert client.get(f"/sessions/{session}", headers=auth(alice)).get_json()["active_turn"] is None
    assert client.get(f"/sessions/{session}/messages", headers=auth(alice)).get_json()["messages"] == []
    for response in reversed(held):
        response.close()


def test_a_streamed_widget_answer_at_the_cap_is_refused_before_it_is_applied(limited: Flask, fake_llm):
    client, alice = limited.test_client(), new_token(limited, "alice")
    fake_llm.queue("/ask_text goal What do you want to build?", "A web scraper it is.")
    pending = client.post("/chat", json={"message": "plan"}, headers=auth(alice)).get_json()["messages"][1]
    meta, session = pending["meta"], pending["session_id"]
    held = [client.get(f"/sessions/{session}/trace", headers=auth(alice), buffered=False) for _ in range(2)]
    body = {
        "conversationId": session,
        "toolCallId": meta["tool_call_id"],
        "toolName": "ask_text",
        "targetField": "goal",
        "value": "a scraper",
        "inputMethod": "text",
    }
    refused = client.post("/api/ai/tool-result", json=body, headers={**auth(alice), "Accept": "text/event-stream"})
    assert_refused(refused, "streams")
    assert client.get(f"/sessions/{session}", headers=auth(alice)).get_json()["active_turn"] is None
    assert [
        m["role"] for m in client.get(f"/sessions/{session}/messages", headers=auth(alice)).get_json()["messages"]
    ] == ["user", "ui_tools"]  # the answer was not applied: the call is still pending
    for response in reversed(held):
        response.close()
    answered = client.post("/api/ai/tool-result", json=body, headers=auth(alice))
    assert answered.status_code == 200, answered.get_json()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    tmp = Path(tmp_path_factory.mktemp("streams"))
    (tmp / "script.json").write_text("[]")
    env = {
        "LLM_PROVIDER": "scripted",
        "SCRIPTED_REPLIES": str(tmp / "script.json"),
        "MAX_STREAMS_PER_USER": "2",
        "TRACE_ENABLED": "1",
        "SSE_HEARTBEAT_S": "1",
    }
    with running_server(tmp, env) as found:
        yield found


def open_stream(port: int, path: str, token: str) -> tuple[socket.socket, int]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    head = sock.recv(4096)
    return sock, int(head.split(b" ", 2)[1])


@pytest.mark.slow
def test_on_the_real_server_a_client_that_leaves_gives_its_seat_back(server):
    session = requests.post(f"{server.base}/sessions", json={}, headers=auth(server.admin_token), timeout=10).json()
    path = f"/sessions/{session['id']}/trace"
    held = [open_stream(server.port, path, server.admin_token) for _ in range(2)]
    assert [status for _, status in held] == [200, 200]
    refused = requests.get(f"{server.base}{path}", headers=auth(server.admin_token), timeout=10)
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1
    held[0][0].close()  # the tab closes: the server notices the disconnect and frees the seat
    deadline = time.monotonic() + HUNG_S  # only stops a hung test
    while True:
        sock, status = open_stream(server.port, path, server.admin_token)
        if status == 200 or time.monotonic() > deadline:
            break
        sock.close()
        time.sleep(0.1)
    assert status == 200
    sock.close()
    held[1][0].close()
