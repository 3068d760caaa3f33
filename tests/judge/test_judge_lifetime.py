"""Every judge container has its own wall-clock limit, enforced inside it: it stops even when
the server that should kill it died (kill -9) before its `finally` ran.

A child process plays the server: it starts a sandbox the way the judge does, prints its id,
then (for a step) sends a step that would run for ten minutes, and is killed with SIGKILL.
The test then polls the engine until the container no longer runs. Marked `docker` and `slow`.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import docker
import pytest

from judge.languages import LANGUAGES
from judge.models import Limits
from judge.sandbox import LIFETIME_MARGIN_S, Sandbox
from judge.service import Judge
from testing.hostile import ROOT
from tests.judge_support import require_judge

pytestmark = [pytest.mark.docker, pytest.mark.slow]

IMAGE = LANGUAGES["python"].image
STEP_S = 2  # the step's deadline in the dead server; the container's own limit adds the margin
IDLE_S = 2  # a lost pooled container's idle limit
POLL_MARGIN_S = 8  # the engine's stop and the poll, beyond the container's own limit

SERVER = """
import sys, time
from judge.models import Limits
from judge.sandbox import Sandbox
from judge.service import Judge

judge = Judge.from_env()
options = {{"idle_s": {idle_s}}} if sys.argv[1] == "idle" else {{}}  # a step: the default idle limit
box = Sandbox.start(judge.client, {image!r}, Limits(), pooled=True, **options)
print(box.id, flush=True)
if sys.argv[1] == "step":
    box.run_step(["sleep", "600"], timeout_s={step_s})  # the server is killed before this deadline
time.sleep(600)
"""


@pytest.fixture(scope="module")
def engine() -> Iterator[docker.DockerClient]:
    judge = Judge.from_env()
    require_judge(*judge.available())
    assert judge.client is not None
    yield judge.client
    judge.close()


def running(engine: docker.DockerClient, container_id: str) -> bool:
    try:
        return bool(engine.api.inspect_container(container_id)["State"]["Running"])
    except docker.errors.NotFound:
        return False


@pytest.mark.parametrize(("phase", "limit_s"), [("idle", IDLE_S), ("step", STEP_S + LIFETIME_MARGIN_S)])
def test_a_container_whose_server_was_killed_stops_by_itself(
    engine: docker.DockerClient, phase: str, limit_s: int
) -> None:
    source = SERVER.format(image=IMAGE, idle_s=IDLE_S, step_s=STEP_S)
    server = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(source), phase], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    container_id = server.stdout.readline().strip()
    try:
        assert container_id, "the child server started no sandbox"
        time.sleep(1)  # the step is under way (a step: its deadline is not reached yet)
        server.kill()  # SIGKILL: no finally, no atexit, no pool close
        server.wait(10)
        killed = time.monotonic()
        assert running(engine, container_id)  # nothing on this side stops it any more
        while running(engine, container_id):
            assert time.monotonic() - killed < limit_s + POLL_MARGIN_S, "the container outlived its own limit"
            time.sleep(0.2)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
        if container_id:
            try:
                engine.containers.get(container_id).remove(force=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as error:
                if error.status_code != 409:  # 409: its own removal is under way, as the test expects
                    raise


def test_a_long_step_within_its_deadline_is_not_cut_by_the_idle_limit(engine: docker.DockerClient) -> None:
    box = Sandbox.start(engine, IMAGE, Limits(), idle_s=1)
    try:
        step = box.run_step(["sh", "-c", "sleep 3; echo done"], timeout_s=5)
        assert (step.exit_code, step.stdout, step.killed) == (0, b"done\n", False)
        again = box.run_step(["echo", "still here"], timeout_s=5)  # within the idle limit
        assert (again.exit_code, again.stdout) == (0, b"still here\n")
        time.sleep(1 + POLL_MARGIN_S / 2)
        assert not running(engine, box.id)  # idle past its limit: it ended itself
    finally:
        box.destroy()
