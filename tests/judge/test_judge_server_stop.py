"""The judge's containers over a real server's life: one pool per serving process, nothing left
after SIGTERM or SIGINT (a run in flight included), and the reaper clears what a crash left.

Each test starts `python app.py` with the judge on (`JUDGE_POOL_SIZE=1`) and counts only the
containers labelled with that server's process id (`orchestrator.judge.pid`): other servers
and tests share the engine and are never looked at. Marked `docker` and `slow`.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import docker
import pytest
import requests

from judge.languages import LANGUAGES
from judge.sandbox import OWNER_LABEL, PID_LABEL, POOL_LABEL
from judge.service import Judge
from testing.hostile import ROOT, free_port, server_env
from tests.judge_support import require_judge
from tests.process_support import stop_process, wait_until_serving

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGES = len({language.image for language in LANGUAGES.values()})


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    judge = Judge.from_env()
    require_judge(*judge.available())
    assert judge.client is not None
    yield judge.client
    judge.close()


def containers_of(engine: docker.DockerClient, pid: int) -> list[Any]:
    return list(engine.containers.list(all=True, filters={"label": f"{PID_LABEL}={pid}"}))


def wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


@contextmanager
def judge_server(tmp: Path) -> Iterator[tuple[subprocess.Popen[Any], str, str]]:
    """A server with the judge and a pool of one container per image: (process, base URL, token)."""
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = server_env(
        tmp,
        port,
        {
            "JUDGE_ENABLED": "1",
            "JUDGE_POOL_SIZE": "1",
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": "http://127.0.0.1:9/v1",
            "RATE_LIMITS": "runs=off",
        },
    )
    log = (tmp / "server.log").open("w")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_serving(process, f"http://127.0.0.1:{port}/health", tmp / "server.log", timeout_s=60)
        yield process, f"http://127.0.0.1:{port}", (tmp / "admin.token").read_text().strip()
    finally:
        if process.poll() is None:
            stop_process(process, log)
        log.close()


def full_pool(engine: docker.DockerClient, pid: int) -> list[Any]:
    wait_for(lambda: len(containers_of(engine, pid)) >= IMAGES, 60, "the pool to fill")
    time.sleep(0.5)  # anything started beyond the pool would show up by now
    return containers_of(engine, pid)


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_one_pool_per_server_and_nothing_left_after_a_stop_with_a_run_in_flight(
    engine: docker.DockerClient, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    with judge_server(tmp_path) as (process, base, token):
        pool = full_pool(engine, process.pid)
        assert len(pool) == IMAGES  # exactly one pool of one container per image
        assert len({container.labels[OWNER_LABEL] for container in pool}) == 1
        assert all(container.labels[POOL_LABEL] == "1" for container in pool)
        answers: list[requests.Response] = []
        body = {
            "language": "python",
            "files": {"main.py": "import time\nprint('started', flush=True)\ntime.sleep(2)\n"},
        }
        runner = threading.Thread(
            target=lambda: answers.append(
                requests.post(f"{base}/run", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)
            )
        )
        runner.start()
        pooled = {container.id for container in pool}
        wait_for(
            lambda: {c.id for c in containers_of(engine, process.pid)} != pooled,
            10,
            "the run to take a pooled container (its refill starts)",
        )
        time.sleep(0.3)  # the program is sleeping now
        process.send_signal(stop_signal)
        assert process.wait(timeout=60) == 0
        runner.join(60)
    assert answers and answers[0].status_code == 200 and answers[0].json()["stdout"] == "started\n"
    assert containers_of(engine, process.pid) == []


def test_the_reaper_removes_what_a_crashed_server_left_at_the_next_start(
    engine: docker.DockerClient, tmp_path: Path
) -> None:
    with judge_server(tmp_path / "first") as (crashed, _, _):
        assert len(full_pool(engine, crashed.pid)) == IMAGES
        crashed.kill()  # no clean-up runs
        crashed.wait(timeout=30)
    assert len(containers_of(engine, crashed.pid)) == IMAGES  # left behind
    with judge_server(tmp_path / "second") as (process, _, _):
        assert containers_of(engine, crashed.pid) == []  # removed before the new server served
        assert len(full_pool(engine, process.pid)) == IMAGES
