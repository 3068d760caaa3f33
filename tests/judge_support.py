"""Shared by the Docker tests: the judge must be there, or the test skips (fails in CI).

Also a pytest plugin (listed in `tests/conftest.py`): a module whose tests use a `judge`
fixture adds `pytest.mark.usefixtures("nothing_left")` to check no container outlives a test.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from judge.models import Limits, RunRequest, Verdict
from judge.sandbox import HOST_LABEL, OWNER_LABEL, PID_LABEL
from judge.service import Judge


def require_judge(ready: bool, reason: str) -> None:
    """Skip when the judge cannot run here, but fail when `JUDGE_REQUIRED=1` (CI)."""
    if ready:
        return
    if os.environ.get("JUDGE_REQUIRED") == "1":
        pytest.fail(f"JUDGE_REQUIRED=1 but the judge is unavailable: {reason}")
    pytest.skip(f"judge unavailable: {reason}")


def ready_judge(judge: Judge) -> Judge:
    require_judge(*judge.available())
    return judge


def leftover_containers(judge: Judge) -> list[object]:
    """This judge's containers still on the engine (should always be none after a run)."""
    assert judge.client is not None
    return list(judge.client.containers.list(all=True, filters={"label": f"{OWNER_LABEL}={judge.owner}"}))


def this_process_containers(judge: Judge) -> list[object]:
    """Judge containers started by any judge of this test process (labelled with its host and pid).

    Never the whole engine's: other processes on a shared machine (servers, other test runs)
    have sandboxes of their own running.
    """
    assert judge.client is not None
    mine = [f"{HOST_LABEL}={socket.gethostname()}", f"{PID_LABEL}={os.getpid()}"]
    return list(judge.client.containers.list(all=True, filters={"label": mine}))


def open_judge(**options: object) -> Iterator[Judge]:
    """Body of a module's `judge` fixture: a ready judge (or skip/fail), closed afterwards."""
    judge = Judge.from_env(**options)  # type: ignore[arg-type]
    require_judge(*judge.available())
    yield judge
    judge.close()


@pytest.fixture
def nothing_left(judge: Judge) -> Iterator[None]:
    """After the test, none of the module judge's containers is left on the engine."""
    yield
    assert leftover_containers(judge) == []


def run_python(judge: Judge, source: str, limits: Limits, stdin: str = "") -> Verdict:
    """`judge.run` of a one-file python program."""
    return judge.run(RunRequest(language="python", files={"main.py": source}, stdin=stdin, limits=limits))
