"""`GET /metrics` (SPEC 16): off unless asked for, a bearer token when one is set, and the
counts of what the app did, read back with prometheus_client's own text parser."""

from __future__ import annotations

from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import new_token

TOKEN = "scrape-secret"


def samples(app: Flask) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = app.test_client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert answer.content_type.startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.get_data(as_text=True))
        for sample in family.samples
    }


def test_metrics_are_off_without_a_token_or_an_explicit_open(make_app):
    app = make_app()
    answer = app.test_client().get("/metrics")
    assert answer.status_code == 404 and answer.get_json()["error"]["code"] == "not_found"


def test_a_token_is_required_when_one_is_set(make_app):
    client = make_app(metrics_token=TOKEN).test_client()
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.get_json()["error"]["code"] == "unauthorized"
    assert client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


def test_metrics_open_answers_anyone(make_app):
    assert make_app(metrics_open=True).test_client().get("/metrics").status_code == 200


def test_turns_tools_provider_calls_and_refusals_are_counted(make_app, fake_llm):
    app = make_app(llm_base_url=fake_llm.openai_base_url, metrics_token=TOKEN, rate_limits="turns=3/minute")
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    client = app.test_client()
    fake_llm.queue("/remember likes tea", "Noted.", "Hello.")
    assert client.post("/chat", json={"message": "I like tea"}, headers=auth).status_code == 200
    assert client.post("/chat", json={"message": "hi"}, headers=auth).status_code == 200
    fake_llm.queue(*["Fine."])
    assert client.post("/chat", json={"message": "again"}, headers=auth).status_code == 200
    assert client.post("/chat", json={"message": "over budget"}, headers=auth).status_code == 429
    found = samples(app)
    assert found[("orchestrator_turns_total", (("kind", "chat"), ("outcome", "done")))] == 3
    assert found[("orchestrator_turn_duration_seconds_count", (("kind", "chat"),))] == 3
    assert found[("orchestrator_tool_runs_total", (("outcome", "ok"), ("tool", "remember")))] == 1
    assert found[("orchestrator_provider_calls_total", (("outcome", "ok"), ("provider", "openai")))] == 4
    assert found[("orchestrator_time_to_first_token_seconds_count", (("provider", "openai"),))] == 4
    assert found[("orchestrator_provider_tokens_total", (("provider", "openai"), ("type", "output")))] > 0
    assert found[("orchestrator_rate_limit_refusals_total", (("budget", "turns"),))] == 1
    assert (
        found[
            (
                "orchestrator_provider_breaker_state",
                (("chain", "chat"), ("model", "test-model"), ("provider", "openai")),
            )
        ]
        == 0
    )
    assert found[("orchestrator_queue_waiting", (("queue", "sandbox"),))] == 0
    assert found[("orchestrator_open_streams", ())] == 0


def test_provider_failures_are_counted_by_class_and_fail_the_turn(make_app):
    app = make_app(metrics_token=TOKEN, llm_timeout_s=2, provider_breaker_failures=1)  # nothing listens on port 9
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    assert app.test_client().post("/chat", json={"message": "hi"}, headers=auth).status_code == 502
    found = samples(app)
    assert found[("orchestrator_provider_failures_total", (("kind", "connection"), ("provider", "openai")))] >= 1
    assert found[("orchestrator_turns_total", (("kind", "chat"), ("outcome", "provider_unavailable")))] == 1
    assert (
        found[
            (
                "orchestrator_provider_breaker_state",
                (("chain", "chat"), ("model", "test-model"), ("provider", "openai")),
            )
        ]
        == 2
    )


def test_each_app_counts_in_its_own_registry(make_app, fake_llm):
    first, second = make_app(metrics_open=True), make_app(metrics_open=True)
    from api.services import services_of

    assert services_of(first).telemetry.metrics.registry is not services_of(second).telemetry.metrics.registry


def open_streams(app: Flask) -> float:
    return samples(app)[("orchestrator_open_streams", ())]


def test_open_streams_rise_while_a_stream_is_open_and_fall_when_it_ends(make_app, fake_llm):
    app = make_app(llm_base_url=fake_llm.openai_base_url, metrics_token=TOKEN)
    auth = {"Authorization": f"Bearer {new_token(app)}", "Accept": "text/event-stream"}
    fake_llm.queue("Hello.")
    response = app.test_client().post("/chat", json={"message": "hi"}, headers=auth)
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    assert open_streams(app) == 1
    assert "event: done" in response.get_data(as_text=True)
    response.close()
    assert open_streams(app) == 0


def test_a_stream_over_the_users_limit_is_a_counted_refusal(make_app, fake_llm):
    app = make_app(llm_base_url=fake_llm.openai_base_url, metrics_token=TOKEN, max_streams_per_user=1)
    auth = {"Authorization": f"Bearer {new_token(app)}", "Accept": "text/event-stream"}
    fake_llm.queue("Hello.")
    client = app.test_client()
    held = client.post("/chat", json={"message": "hi"}, headers=auth)
    assert held.status_code == 200
    assert client.post("/chat", json={"message": "again"}, headers=auth).status_code == 429
    held.get_data()
    held.close()
    assert samples(app)[("orchestrator_rate_limit_refusals_total", (("budget", "streams"),))] == 1
