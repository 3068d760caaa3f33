"""`GET /health` reports the real state: database, provider reachability (cached), judge."""

from __future__ import annotations

from testing.fake_llm import FakeLLMServer


def test_health_ok_when_database_and_provider_answer(client, fake_llm):
    body = client.get("/health").get_json()
    assert body["status"] == "ok"
    assert body["database"] == {"ok": True}
    assert body["provider"]["ok"] is True and body["provider"]["name"] == "openai"
    assert body["provider"]["detail"] == "reachable"
    assert body["judge"]["available"] is False and body["judge"]["reason"]


def test_health_degraded_when_provider_is_unreachable(make_app):
    response = make_app(llm_base_url="http://127.0.0.1:1/v1").test_client().get("/health")
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "degraded"
    assert body["provider"] == {
        "name": "openai", "model": "test-model", "ok": False, "detail": "connection failed",
        "chain": [{"name": "openai", "model": "test-model", "ok": False, "detail": "connection failed"}],
    }


def test_health_reports_a_rejected_key(make_app):
    with FakeLLMServer() as server:
        app = make_app(llm_provider="openrouter", llm_base_url=server.openai_base_url)
        body = app.test_client().get("/health").get_json()
    assert body["provider"]["ok"] is False and body["provider"]["detail"] == "no API key configured"


def test_probe_is_cached(client, fake_llm):
    for _ in range(3):
        assert client.get("/health").status_code == 200
    assert fake_llm.get_paths == ["/v1/models"]
