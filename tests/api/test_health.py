"""`GET /health` reports the real state: database, provider reachability (cached), judge.

The database faults are real: an immutable file (`chattr +i`, which stops root too), a tmpfs
filled to the last byte, a write lock held by another connection.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from api.services import services_of
from llm.hints import fix_hint
from storage.health import PROBE_BUSY_MS
from testing.disk_faults import database_files, filled, read_only, require_fault_support, small_filesystem
from testing.fake_llm import FakeLLMServer


def test_health_ok_when_database_and_provider_answer(client, fake_llm):
    body = client.get("/health").get_json()
    assert body["status"] == "ok"
    database = body["database"]
    assert (database["ok"], database["state"], database["detail"]) == (True, "ok", "a new connection can write")
    assert database["free_bytes"] > 0
    assert isinstance(database["probe_ms"], (int, float)) and database["probe_ms"] >= 0  # its speed: bench, not here
    assert body["provider"]["ok"] is True and body["provider"]["name"] == "openai"
    assert body["provider"]["detail"] == "reachable"
    assert body["judge"]["available"] is False and body["judge"]["reason"]


def test_health_degraded_when_provider_is_unreachable(make_app):
    response = make_app(llm_base_url="http://127.0.0.1:1/v1").test_client().get("/health")
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "degraded"
    closed = {"state": "closed", "failures": 0, "retry_at": None}
    hint = fix_hint("openai", "test-model")
    assert body["provider"] == {
        "name": "openai",
        "model": "test-model",
        "ok": False,
        "detail": "connection failed",
        "hint": hint,
        "breaker": closed,
        "chain": [
            {
                "name": "openai",
                "model": "test-model",
                "ok": False,
                "detail": "connection failed",
                "hint": hint,
                "breaker": closed,
            }
        ],
    }
    assert hint.startswith("check that openai answers at LLM_BASE_URL and knows the model 'test-model' (LLM_MODEL)")
    assert "make demo" in hint and "LLM_PROVIDER" in hint


def test_an_unreachable_ollama_hints_at_starting_it_and_pulling_the_model(make_app):
    body = (
        make_app(llm_provider="ollama", llm_base_url="http://127.0.0.1:1", llm_model="qwen2.5:0.5b")
        .test_client()
        .get("/health")
        .get_json()
    )
    assert body["provider"]["hint"] == (
        "start Ollama (`ollama serve`) and pull the model (`ollama pull qwen2.5:0.5b`), or set LLM_PROVIDER, "
        "LLM_BASE_URL and LLM_MODEL to a model server that answers, or run `make demo` (scripted replies, no model "
        "needed)"
    )


def test_a_healthy_provider_has_no_hint(client, fake_llm):
    provider = client.get("/health").get_json()["provider"]
    assert provider["ok"] is True and "hint" not in provider and "hint" not in provider["chain"][0]


def test_health_reports_a_rejected_key(make_app):
    with FakeLLMServer() as server:
        app = make_app(llm_provider="openrouter", llm_base_url=server.openai_base_url)
        body = app.test_client().get("/health").get_json()
    assert body["provider"]["ok"] is False and body["provider"]["detail"] == "no API key configured"
    assert body["provider"]["hint"].startswith("give openrouter a valid API key (LLM_API_KEY)")


def test_probe_is_cached(client, fake_llm):
    for _ in range(3):
        assert client.get("/health").status_code == 200
    assert fake_llm.get_paths == ["/v1/models"]


def database_health(client) -> tuple[int, dict]:  # type: ignore[no-untyped-def]
    response = client.get("/health")
    return response.status_code, response.get_json()


def test_a_read_only_database_is_reported_and_recovers(client, app):
    require_fault_support()
    with read_only(database_files(Path(services_of(app).database.path))):
        status, body = database_health(client)
    assert (status, body["status"]) == (503, "degraded")
    assert (body["database"]["ok"], body["database"]["state"]) == (False, "read_only")
    assert "read-only" in body["database"]["detail"]
    status, body = database_health(client)
    assert (status, body["database"]["state"]) == (200, "ok")


def test_a_full_disk_is_reported_and_recovers(make_app, fake_llm, tmp_path):
    require_fault_support()
    with small_filesystem(tmp_path / "small", 4) as mount:
        client = make_app(llm_base_url=fake_llm.openai_base_url, database_path=str(mount / "app.db")).test_client()
        with filled(mount):
            status, body = database_health(client)
        assert (status, body["database"]["ok"], body["database"]["state"]) == (503, False, "full")
        assert body["database"]["free_bytes"] == 0 and "free" in body["database"]["detail"]
        status, body = database_health(client)
        assert (status, body["database"]["state"]) == (200, "ok")


def test_a_write_lock_held_too_long_is_reported_quickly(client, app):
    """The probe waits its own PROBE_BUSY_MS, not the database's 5 s busy timeout: the lock is let go
    after 2.5 s, so a probe that waited longer would find it free and answer "ok"."""
    holder = sqlite3.connect(services_of(app).database.path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(2.5, holder.execute, args=("ROLLBACK",))
    release.start()
    try:
        started = time.perf_counter()
        status, body = database_health(client)
        elapsed_ms = (time.perf_counter() - started) * 1000
    finally:
        release.cancel()
        release.join()
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
    assert (status, body["database"]["state"]) == (503, "locked")
    assert f"more than {PROBE_BUSY_MS} ms" in body["database"]["detail"] and elapsed_ms >= PROBE_BUSY_MS
