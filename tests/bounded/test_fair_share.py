"""Fair share of the shared worker pool (SPEC 12): with every worker held, a freed one goes to
the waiting user holding the fewest, so one user's queue never goes ahead of another user's
job. Real worker processes (the jobs are in `tests/bounded_jobs.py`); order, not wall time."""

from __future__ import annotations

import threading
from pathlib import Path

from bounded.jobs import Done, Job, JobFailed, Kind, Limits
from bounded.pool import WorkerPool
from foundation.fair_share import FairGate
from testing.waiting import wait_until

KIND = Kind("test", ("tests.bounded_jobs",), memory_mb=64, site_packages=False, keep_warm=2)
LIMITS = Limits(wall_s=30.0)
ALICE, BOB = 1, 2


class Started:
    """Jobs that log their start to one file and end when the test releases them by tag."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = tmp_path / "starts"
        self.log.touch()
        self.outcomes: dict[str, Done | JobFailed] = {}

    def submit(self, pool: WorkerPool, user: int, tag: str) -> threading.Thread:
        def run() -> None:
            job = Job("tests.bounded_jobs:mark_then_wait", {"log": str(self.log), "tag": tag})
            self.outcomes[tag] = pool.run(KIND, job, LIMITS, user=user)

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def order(self) -> list[str]:
        return self.log.read_text().split()

    def release(self, tag: str) -> None:
        Path(f"{self.log}.{tag}.go").touch()


def test_another_users_job_starts_at_the_next_free_worker_ahead_of_a_queue(tmp_path: Path) -> None:
    started = Started(tmp_path)
    with WorkerPool(2) as pool:
        alice = [started.submit(pool, ALICE, f"a{n}") for n in range(2)]
        wait_until(lambda: len(started.order()) == 2, "alice's first two jobs never started")
        alice += [started.submit(pool, ALICE, f"a{n}") for n in range(2, 6)]  # queued: every worker is hers
        wait_until(lambda: pool.waiting() == 4, "alice's queue never formed")
        bob = started.submit(pool, BOB, "b")
        wait_until(lambda: pool.waiting() == 5, "bob's job never asked")
        started.release(started.order()[0])
        wait_until(lambda: len(started.order()) == 3, "no job started after a worker came free")
        assert started.order()[2] == "b"  # behind alice's running jobs only, not her queue
        for tag in ["b", *(f"a{n}" for n in range(6))]:
            started.release(tag)
        for thread in [*alice, bob]:
            thread.join(30)
    assert started.outcomes["b"] == Done("b")  # no busy error for bob
    assert all(started.outcomes[f"a{n}"] == Done(f"a{n}") for n in range(6))  # alice's queue still ran


def test_a_user_alone_takes_every_place_and_a_second_user_gets_the_next_one() -> None:
    gate = FairGate(3)
    far = float("inf")
    assert all(gate.acquire(ALICE, far) for _ in range(3))  # nobody else waits: no cap on alice
    got: list[int] = []

    def wait_for_place(user: int) -> None:
        if gate.acquire(user, far):
            got.append(user)

    for count, user in enumerate((ALICE, ALICE, BOB), start=1):  # alice queued first
        threading.Thread(target=wait_for_place, args=(user,)).start()
        wait_until(lambda count=count: gate.waiting() == count, "a waiter never asked")
    gate.release(ALICE)
    wait_until(lambda: got == [BOB], "the freed place did not go to bob")
    assert gate.held() == {ALICE: 2, BOB: 1}
    gate.release(ALICE)
    gate.release(ALICE)
    wait_until(lambda: got == [BOB, ALICE, ALICE], "alice's queued jobs never ran")


def test_a_waiting_job_gives_up_at_its_deadline() -> None:
    gate = FairGate(1)
    assert gate.acquire(ALICE, float("inf"))
    assert not gate.acquire(BOB, 0.0)
    assert gate.waiting() == 0 and gate.held() == {ALICE: 1}
