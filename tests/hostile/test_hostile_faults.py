"""Faults from outside against the real server (issue 11, class 9): see `testing/attacks/faults.py`.

One server for the database faults, its database on a 16 MB tmpfs of its own (so it can be
filled for real), another for the hung model (a 1 s provider deadline); every fault is made
from outside: `chattr +i`, a filler file, a hung fake model. While
a fault lasts, turns may fail, but only with a clear 503 or 502; once it ends, service
resumes without a restart. Another user's reads answer throughout.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from testing.attacks import Target, hostile_target
from testing.attacks.faults import (
    AFTER_TURNS,
    BREAKER_FAILURES,
    DATABASE_ENV,
    LLM_TIMEOUT_S,
    MODEL_ENV,
    DatabaseWindow,
    database_read_only_for_a_moment,
    full_disk,
    hung_model,
)
from testing.disk_faults import require_fault_support, small_filesystem
from testing.hostile import Bystander, PeakMemory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    require_fault_support()
    tmp = tmp_path_factory.mktemp("faults")
    with (
        small_filesystem(tmp / "db", 16) as mount,
        hostile_target(tmp, {**DATABASE_ENV, "DATABASE_PATH": str(mount / "app.db")}) as target,
    ):
        yield target


@pytest.fixture(scope="module")
def model_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with hostile_target(tmp_path_factory.mktemp("model"), MODEL_ENV) as target:
        yield target


def bystander_reads(target: Target) -> Bystander:
    """Bob lists his sessions again and again: reads must keep working through a write fault."""
    url = f"{target.server.base}/sessions"
    return Bystander(
        target.server, request=lambda: requests.get(url, headers=target.headers(target.bystander), timeout=10)
    )


def check_window(
    target: Target, window: DatabaseWindow, state: str, memory: PeakMemory, cpu_s: float, bystander: Bystander
) -> None:
    status, body = window.health_during
    assert (status, body["status"], body["database"]["ok"], body["database"]["state"]) == (
        503,
        "degraded",
        False,
        state,
    )
    for turn in window.during:  # refused clearly, never a 500 (a turn that found room succeeds)
        assert (turn.status, turn.code) in {(200, None), (503, "storage_unavailable")}, turn
        assert turn.status == 200 or turn.body_bytes < 2000
    assert window.failed_after == 0, [turn for turn in window.after if turn.status != 200][:3]
    assert len(window.after) == AFTER_TURNS
    status, body = window.health_after
    assert (status, body["database"]["ok"], body["database"]["state"]) == (200, True, "ok")
    assert memory.added_mb < 100
    assert cpu_s < 30 + 2
    assert bystander.failures == [] and bystander.latencies_ms


def test_a_database_read_only_for_a_moment_serves_again_without_a_restart(target: Target) -> None:
    cpu = target.server.cpu_s()
    with PeakMemory(target.server) as memory, bystander_reads(target) as bystander:
        window = database_read_only_for_a_moment(target)
    check_window(target, window, "read_only", memory, target.server.cpu_s() - cpu, bystander)


def test_a_full_disk_is_reported_and_service_resumes_once_there_is_room(target: Target) -> None:
    cpu = target.server.cpu_s()
    with PeakMemory(target.server) as memory, bystander_reads(target) as bystander:
        window = full_disk(target)
    assert any(turn.status == 503 for turn in window.during)  # the turns' large messages did not fit
    check_window(target, window, "full", memory, target.server.cpu_s() - cpu, bystander)


def test_a_hung_model_fails_fast_once_its_circuit_opens_and_recovers(model_target: Target) -> None:
    target = model_target
    cpu = target.server.cpu_s()
    with PeakMemory(target.server) as memory, bystander_reads(target) as bystander:
        report = hung_model(target)
    first, *rest = report.hung
    assert (first.status, first.code) == (502, "provider_unavailable")
    # the breaker counts turns, not calls: each of the first turns made its two attempts (one fault of
    # the server), the turn that reached the threshold opened the circuit with its first call, each call
    # cut by the server's deadline (not dropped by the hung model 30 s on); the other turns failed fast:
    # the open circuit never called the model
    opened_at = 2 * (BREAKER_FAILURES - 1) + 1
    expected = [2 * (n + 1) for n in range(BREAKER_FAILURES - 1)]
    expected += [opened_at] * (len(report.hung) - len(expected))
    assert report.provider_calls == expected, report.provider_calls
    assert [(answer.client_hung_up, answer.dropped) for answer in report.hung_answers] == [(True, False)] * opened_at
    for turn in rest:
        assert (turn.status, turn.code) == (502, "provider_unavailable"), turn
        assert turn.body_bytes < 2000
    [entry] = report.health_open["provider"]["chain"]
    assert entry["breaker"]["state"] == "open" and entry["breaker"]["failures"] >= BREAKER_FAILURES
    assert entry["breaker"]["retry_at"]
    assert report.recovered.status == 200
    assert memory.added_mb < 100
    assert target.server.cpu_s() - cpu < 4 * LLM_TIMEOUT_S + 2
    assert bystander.failures == []
