"""`GET /health` reports the real state: database, provider reachability (cached), judge.

The database faults are real: an immutable file (`chattr +i`, which stops root too), a tmpfs
filled to the last byte, a write lock held by another connection.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from api.health import CachedProbe, Readiness, readiness_of, redis_probe
from api.services import services_of
from llm.hints import fix_hint
from storage.health import PROBE_BUSY_MS
from testing.disk_faults import database_files, filled, read_only, require_fault_support, small_filesystem
from testing.fake_llm import FakeLLMServer
from tests.process_support import ROOT, clean_env, free_port, stop_process, wait_until_serving


@pytest.fixture
def app(make_app, fake_llm):  # type: ignore[no-untyped-def]
    """These tests make a fault and recover from it between two calls: every call probes
    (`HEALTH_CACHE_S=0`). The cache has its own tests, below."""
    return make_app(llm_base_url=fake_llm.openai_base_url, health_cache_s=0)


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
        client = make_app(
            llm_base_url=fake_llm.openai_base_url, database_path=str(mount / "app.db"), health_cache_s=0
        ).test_client()
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


# --- liveness, readiness and the shared probes (issue 24 item 8) ----------------------------------


class Clock:
    """A monotonic clock the test moves by hand: cache periods without waiting for them."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def counted(probe: CachedProbe) -> list[int]:  # type: ignore[type-arg]
    """Wrap `probe`'s function: the returned list grows by one per real probe."""
    calls: list[int] = []
    inner = probe.probe

    def counting():  # type: ignore[no-untyped-def]
        calls.append(1)
        return inner()

    probe.probe = counting
    return calls


def on_clock(readiness: Readiness) -> Clock:
    clock = Clock()
    for probe in readiness.probes():
        probe.clock = clock
    return clock


def many_calls(app, count: int = 120) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
    """`count` calls from 16 threads at once, `/health` and `/health/ready` in turn."""

    def call(index: int) -> tuple[str, int]:
        path = "/health" if index % 2 else "/health/ready"
        return path, app.test_client().get(path).status_code

    with ThreadPoolExecutor(16) as threads:
        return list(threads.map(call, range(count)))


def test_concurrent_health_and_ready_calls_write_probe_once_per_cache_period(make_app, fake_llm):
    app = make_app(llm_base_url=fake_llm.openai_base_url)  # HEALTH_CACHE_S: the default
    probes = readiness_of(app)
    assert probes.ttl_s == 2.0
    clock = on_clock(probes)
    writes, provider, judge = counted(probes.database), counted(probes.provider), counted(probes.judge)
    assert {status for _, status in many_calls(app)} == {200}
    assert (len(writes), len(provider), len(judge)) == (1, 1, 1)
    clock.now += probes.ttl_s - 0.001  # still inside the period
    assert {status for _, status in many_calls(app)} == {200}
    assert len(writes) == 1
    clock.now += 0.002  # the next period: one more probe of each, whoever asks
    assert {status for _, status in many_calls(app)} == {200}
    assert (len(writes), len(provider), len(judge)) == (2, 2, 2)
    assert fake_llm.get_paths == ["/v1/models"]  # the providers' own 30 s cache, below this one


def test_a_caller_never_starts_a_second_probe_while_one_runs(make_app, fake_llm):
    """While a probe runs, a caller holding a previous answer takes it at once; none starts another."""
    app = make_app(llm_base_url=fake_llm.openai_base_url)
    probes = readiness_of(app)
    clock = on_clock(probes)
    first = app.test_client().get("/health/ready").get_json()["checks"]["database"]["checked_at"]
    running, release = threading.Event(), threading.Event()
    inner = probes.database.probe
    calls: list[int] = []

    def slow():  # type: ignore[no-untyped-def]
        calls.append(1)
        running.set()
        assert release.wait(30)
        return inner()

    probes.database.probe = slow
    clock.now += probes.ttl_s + 1
    with ThreadPoolExecutor(1) as background:
        probing = background.submit(app.test_client().get, "/health")
        assert running.wait(30)
        during = [app.test_client().get("/health/ready").get_json() for _ in range(20)]
        assert not probing.done()  # every answer above came while the probe was still running
        release.set()
        assert probing.result().status_code == 200
    assert {body["checks"]["database"]["checked_at"] for body in during} == {first}
    assert len(calls) == 1
    assert app.test_client().get("/health/ready").get_json()["checks"]["database"]["checked_at"] != first


def test_liveness_calls_no_probe(make_app, fake_llm):
    app = make_app(llm_base_url=fake_llm.openai_base_url)
    probes = readiness_of(app)

    def forbidden():  # type: ignore[no-untyped-def]
        raise AssertionError("liveness probed a dependency")

    for probe in probes.probes():
        probe.probe = forbidden
    with ThreadPoolExecutor(8) as threads:
        answers = list(threads.map(lambda _: app.test_client().get("/health/live"), range(40)))
    assert {(answer.status_code, answer.get_data(as_text=True).strip()) for answer in answers} == {
        (200, '{"status":"alive"}')
    }


def test_readiness_reports_every_dependency(client, fake_llm):
    response = client.get("/health/ready")
    assert response.status_code == 200
    body = response.get_json()
    assert (body["status"], body["cache_s"]) == ("ready", 0)
    checks = body["checks"]
    assert set(checks) == {"database", "provider", "judge"}  # no REDIS_URL: no redis check
    assert checks["database"] | {"checked_at": None} == {
        "ok": True,
        "required": True,
        "detail": "a new connection can write",
        "checked_at": None,
    }
    assert (checks["provider"]["ok"], checks["provider"]["required"]) == (True, False)
    assert checks["provider"]["detail"] == "openai: reachable"
    assert (checks["judge"]["ok"], checks["judge"]["required"]) == (False, False)


def test_a_database_that_cannot_be_written_is_not_ready(client, app):
    require_fault_support()
    with read_only(database_files(Path(services_of(app).database.path))):
        ready = client.get("/health/ready")
        status, body = database_health(client)
    assert ready.status_code == 503
    error = ready.get_json()["error"]
    assert error["code"] == "not_ready" and error["message"].startswith("database: the database is read-only")
    assert error["details"]["status"] == "not_ready"
    database = error["details"]["checks"]["database"]
    assert (database["ok"], database["required"]) == (False, True) and "read-only" in database["detail"]
    assert (status, body["status"], body["database"]["state"]) == (503, "degraded", "read_only")
    assert client.get("/health/ready").status_code == 200
    assert client.get("/health/live").status_code == 200


def test_a_down_database_is_probed_once_per_period_too(make_app, fake_llm):
    """A flood while the database is read-only gets 503 from one probe, not one write attempt each."""
    require_fault_support()
    app = make_app(llm_base_url=fake_llm.openai_base_url)
    probes = readiness_of(app)
    on_clock(probes)
    writes = counted(probes.database)
    with read_only(database_files(Path(services_of(app).database.path))):
        answers = many_calls(app, 60)
    assert set(answers) == {("/health", 503), ("/health/ready", 503)}
    assert len(writes) == 1


def test_a_redis_that_does_not_answer_is_reported_down():
    ok, detail = redis_probe("redis://127.0.0.1:1/0")()
    assert ok is False and detail.startswith("Redis does not answer")


@pytest.mark.slow
def test_a_flood_on_the_real_server_write_probes_the_database_once_per_period(
    tmp_path, base_settings, backend_settings, fake_llm
):
    """`python app.py` (uvicorn, its thread pool), on SQLite and PostgreSQL: 300 calls from 24
    clients at once. Every answer names its database probe by `checked_at`; one probe per
    `HEALTH_CACHE_S` period (60 s here) answers all of them, and liveness answers without one."""
    port = free_port()
    extra = {"PORT": str(port), "LLM_BASE_URL": fake_llm.openai_base_url, "HEALTH_CACHE_S": "60"}
    extra.update({"LLM_PROVIDER": "openai", "LLM_MODEL": "m"})
    if "database_url" in backend_settings:
        extra["DATABASE_URL"] = backend_settings["database_url"]
    base, log_path = f"http://127.0.0.1:{port}", tmp_path / "server.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "app.py"],
            cwd=ROOT,
            env=clean_env(tmp_path, base_settings, **extra),
            stdout=log,
            stderr=log,
        )
    try:
        wait_until_serving(process, f"{base}/health/live", log_path)
        started = time.monotonic()
        with ThreadPoolExecutor(24) as clients:
            answers = list(
                clients.map(
                    lambda path: (path, requests.get(base + path, timeout=60)),
                    ["/health", "/health/ready", "/health/live"] * 100,
                )
            )
        periods = 1 + int((time.monotonic() - started) // 60)
    finally:
        stop_process(process)
    assert {(path, answer.status_code) for path, answer in answers} == {
        ("/health", 200),
        ("/health/ready", 200),
        ("/health/live", 200),
    }
    probes = {answer.json()["database"]["checked_at"] for path, answer in answers if path == "/health"}
    probes |= {answer.json()["checks"]["database"]["checked_at"] for path, answer in answers if path == "/health/ready"}
    assert 1 <= len(probes) <= periods


def test_a_configured_redis_is_required_for_readiness(make_app, fake_llm, redis_server, redis_url):
    app = make_app(llm_base_url=fake_llm.openai_base_url, redis_url=redis_url, health_cache_s=0)
    client = app.test_client()
    ready = client.get("/health/ready")
    assert ready.status_code == 200
    assert ready.get_json()["checks"]["redis"] | {"checked_at": None} == {
        "ok": True,
        "required": True,
        "detail": "Redis answers a ping",
        "checked_at": None,
    }
    redis_server.stop()
    try:
        down = client.get("/health/ready")
        live = client.get("/health/live")
    finally:
        redis_server.start()
    assert down.status_code == 503
    error = down.get_json()["error"]
    assert error["code"] == "not_ready" and error["message"].startswith("redis: Redis does not answer")
    assert error["details"]["checks"]["redis"]["ok"] is False and error["details"]["checks"]["database"]["ok"] is True
    assert live.status_code == 200
    assert client.get("/health/ready").status_code == 200
