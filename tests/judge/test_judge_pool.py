"""The pool after a fork: the child gets its own workers and containers, never the parent's.

Marked `docker`: skipped without an engine unless JUDGE_REQUIRED=1, where they fail.
"""

from __future__ import annotations

import os

import pytest

from judge.models import RunRequest
from judge.service import Judge
from tests.judge_support import leftover_containers, require_judge

pytestmark = pytest.mark.docker


def ready_ids(judge: Judge) -> set[str]:
    assert judge.pool is not None
    return {box.id for ready in judge.pool._ready.values() for box in ready}


def test_a_forked_child_fills_its_own_pool_and_never_shares_the_parents() -> None:
    judge = Judge.from_env(pool_size=1)
    require_judge(*judge.available())
    try:
        assert judge.pool is not None and judge.pool.wait_full(60)
        parents = ready_ids(judge)
        pid = os.fork()
        if pid == 0:  # the child: exit code 0 only if every check holds
            ok = False
            try:
                ok = judge.pool.wait_full(60) and not ready_ids(judge) & parents
                verdict = judge.run(RunRequest(language="python", files={"main.py": "print('child')"}))
                ok = ok and verdict.stdout == "child\n"
                judge.close()
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert ready_ids(judge) == parents  # the parent's pool is untouched
    finally:
        judge.close()
    assert leftover_containers(judge) == []


def test_an_empty_pool_hands_out_the_sandbox_being_started_instead_of_none() -> None:
    judge = Judge.from_env(pool_size=1)
    require_judge(*judge.available())
    try:
        pool = judge.pool
        assert pool is not None and pool.wait_full(60)
        image = next(iter(pool._ready))
        first = pool.take(image, judge.limits)
        assert first is not None
        assert pool.take(image, judge.limits) is None  # no wait: the refill has not finished
        second = pool.take(image, judge.limits, wait_s=30)  # waits for the refill under way
        assert second is not None and second.id != first.id
        for box in (first, second):
            pool.discard(box)
    finally:
        judge.close()
    assert leftover_containers(judge) == []
