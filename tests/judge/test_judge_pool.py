"""The pool after a fork: the child gets its own workers and containers, never the parent's;
run admission: a fair share of the judge per user, busy as `Busy` and 503 over HTTP.

Marked `docker`: skipped without an engine unless JUDGE_REQUIRED=1, where they fail.
"""

from __future__ import annotations

import os
import threading

import pytest

from api.services import services_of
from foundation.fair_share import Busy
from judge.models import RunRequest
from judge.service import Judge
from testing.waiting import wait_until
from tests.conftest import new_token
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


# run admission: a fair share per user (SPEC 12) ------------------------------------------------

ALICE, BOB = 1, 2
SLEEP = RunRequest(language="python", files={"main.py": "import time\ntime.sleep(1.5)\nprint('slept')"})
QUICK = RunRequest(language="python", files={"main.py": "print('quick')"})


def test_another_users_run_gets_the_next_place_ahead_of_a_users_queue() -> None:
    """One place: alice's run holds it and two more of hers wait; bob's run, asking last,
    gets the place as soon as it is free; a run that waits past `queue_wait_s` is `Busy`."""
    judge = Judge.from_env(runs=1)
    require_judge(*judge.available())
    outcomes: dict[str, str] = {}

    def run(user: int, tag: str, request: RunRequest) -> threading.Thread:
        def body() -> None:
            try:
                outcomes[tag] = judge.run(request, user=user).status
            except Busy:
                outcomes[tag] = "busy"

        thread = threading.Thread(target=body)
        thread.start()
        return thread

    try:
        threads = [run(ALICE, "a0", SLEEP)]
        wait_until(lambda: judge.runs.held() == {ALICE: 1}, "alice's first run never got its place")
        threads += [run(ALICE, "a1", SLEEP), run(ALICE, "a2", SLEEP)]
        wait_until(lambda: judge.runs.waiting() == 2, "alice's queue never formed")
        threads.append(run(BOB, "b", QUICK))
        wait_until(lambda: judge.runs.waiting() == 3, "bob's run never asked")
        wait_until(lambda: judge.runs.held() not in ({ALICE: 1}, {}), "the place never changed hands", timeout_s=30)
        assert judge.runs.held() == {BOB: 1}  # not alice's next run
        for thread in threads:
            thread.join(60)
        assert outcomes == {"a0": "ok", "a1": "ok", "a2": "ok", "b": "ok"}

        judge.queue_wait_s = 0.2
        holder = run(ALICE, "held", SLEEP)
        wait_until(lambda: judge.runs.held() == {ALICE: 1}, "alice's run never got its place")
        with pytest.raises(Busy, match="busy"):
            judge.run(QUICK, user=BOB)
        holder.join(60)
    finally:
        judge.close()
    assert leftover_containers(judge) == []


def test_a_busy_judge_answers_503_with_retry_after(make_app, fake_llm) -> None:
    """`/run` and `/submit` when every place is held: 503 `busy` with Retry-After, never 500."""
    app = make_app(llm_base_url=fake_llm.openai_base_url, judge_enabled=True, judge_runs=1)
    status = services_of(app).judge_status
    require_judge(status["available"], status["reason"])
    judge = services_of(app).judge
    judge.queue_wait_s = 0.2
    assert judge.runs.acquire(999, float("inf"))  # another user's run holds the only place
    try:
        token = new_token(app, "alice")
        body = {"language": "python", "files": {"main.py": "print(1)"}}
        response = app.test_client().post("/run", json=body, headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 503, response.get_data(as_text=True)
        assert response.get_json()["error"]["code"] == "busy"
        assert int(response.headers["Retry-After"]) >= 1
    finally:
        judge.runs.release(999)
        judge.close()
