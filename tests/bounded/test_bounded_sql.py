"""The SQL kind of the worker pool (`bounded/sql*.py`): limits that hold inside one SQLite
call, workers that are killed, reused and never left behind, and every failure in the words
the SQL tools use. Real worker processes throughout (no stand-ins); the pool's own rules for
every kind (the cap, dying with the server, no environment) are in test_bounded_worker.py."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from bounded.pool import WorkerPool
from bounded.sql import run_memory, run_select
from bounded.sql_fetch import OverBudget, fetch_exact, fetch_preview
from bounded.sql_memory import open_read_only
from bounded.sql_values import MemoryJob, SelectAnswer, SelectJob, SqlError
from foundation.cancellation import Cancelled, CancelToken
from storage.db import Database
from testing.attacks.sql import BLOB_ROWS, GROWING_CTE, SLOW_CALL
from testing.waiting import ReapedCpu, wait_until
from tests.process_support import wait_gone

SETUP = "CREATE TABLE t (x INTEGER, s TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b');"


def select(pool: WorkerPool, sql: str, deadline_s: float = 1.0, setup: str = SETUP) -> SelectAnswer | SqlError:
    return run_select(pool, SelectJob(setup_sql=setup, sql=sql, deadline_s=deadline_s, max_rows=1000))


@pytest.fixture(scope="module")
def box():
    with WorkerPool() as shared:
        yield shared


def test_an_ordinary_query_reuses_a_warm_worker(box: WorkerPool) -> None:
    assert select(box, "SELECT x, s FROM t ORDER BY x") == SelectAnswer(columns=["x", "s"], rows=[[1, "a"], [2, "b"]])
    pids = box.worker_pids()
    for _ in range(20):
        assert isinstance(select(box, "SELECT count(*) FROM t"), SelectAnswer)
        assert box.worker_pids() == pids  # no process start per call
    assert len(pids) == 1


@pytest.mark.parametrize(
    "sql, code, words",
    [
        ("SELECT zeroblob(2000000)", "TOO_LARGE", "too big"),
        ("SELECT replace(printf('%.*c', 600000, 'x'), 'x', 'xx')", "TOO_LARGE", "too big"),
        ("SELECT " + ", ".join(f"{i} AS c{i}" for i in range(65)), "TOO_LARGE", "too many columns"),
        (BLOB_ROWS, "TOO_LARGE", "memory"),  # each value under the cap, the row over the heap limit
        (GROWING_CTE, "TOO_LARGE", "memory"),  # UNION's dedupe index inside the engine
        ("SELECT 'a' LIKE printf('%.*c', 2000, '%')", "VALIDATION_FAILED", "LIKE or GLOB pattern too complex"),
        ("SELECT 1" + " + 1" * 300, "VALIDATION_FAILED", "depth 200"),
        ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r", "TIMEOUT", "1 s"),
    ],
)
def test_engine_limits(box: WorkerPool, sql: str, code: str, words: str) -> None:
    answer = select(box, sql)  # each would otherwise run for ever or answer more than the caps
    assert isinstance(answer, SqlError) and answer.code == code and words in answer.message, answer


def test_one_slow_function_call_is_killed_at_the_deadline() -> None:
    """The call needs about 20 s of CPU and RLIMIT_CPU stops it after 8 (set-up 5 s + 0.5 s + slack):
    a worker killed at the 0.5 s deadline burnt far less (CPU time: a busy machine does not stretch it;
    a pool of its own, so what is counted is this worker's start-up and these two queries)."""
    with WorkerPool(1) as own:
        select(own, "SELECT 1")
        before = own.worker_pids()
        started = time.monotonic()
        with ReapedCpu() as cpu:
            answer = select(own, SLOW_CALL, deadline_s=0.5)
        assert isinstance(answer, SqlError) and answer.code == "TIMEOUT" and "0.5 s" in answer.message
        assert time.monotonic() - started >= 0.5 and cpu.seconds < 3, cpu.seconds
        assert wait_gone(before) == []  # the worker that ran it is gone, not left computing
        assert isinstance(select(own, "SELECT 1"), SelectAnswer)  # and a new one serves the next job


def test_a_worker_has_hard_limits(box: WorkerPool) -> None:
    select(box, "SELECT 1")
    limits = Path(f"/proc/{box.worker_pids()[0]}/limits").read_text()
    address_space = next(line for line in limits.splitlines() if line.startswith("Max address space"))
    assert int(address_space.split()[3]) < 512 * 1024 * 1024
    cpu = next(line for line in limits.splitlines() if line.startswith("Max cpu time"))
    assert cpu.split()[3] != "unlimited"


def test_cancel_kills_the_worker_at_once() -> None:
    token = CancelToken()
    with WorkerPool() as own:
        threading.Timer(0.3, token.cancel).start()
        with ReapedCpu() as cpu, pytest.raises(Cancelled):  # a 5 s deadline would answer TIMEOUT, not raise
            run_select(own, SelectJob(setup_sql="", sql=SLOW_CALL, deadline_s=5.0, max_rows=10), token)
        assert cpu.seconds < 3, cpu.seconds  # killed at the cancel, not 5 s of the call's work later
        assert own.worker_pids() == []


def test_jobs_wait_for_a_free_worker_within_their_deadline() -> None:
    """The one worker is held by a query that only a cancel ends: the next job gives up at its own deadline."""
    hold = CancelToken()

    def slow_query() -> None:
        with pytest.raises(Cancelled):
            run_select(own, SelectJob(setup_sql="", sql=SLOW_CALL, deadline_s=60.0, max_rows=10), hold)

    with WorkerPool(1) as own:
        slow = threading.Thread(target=slow_query)
        slow.start()
        wait_until(lambda: own.worker_pids(), "the slow query never got its worker")
        answer = select(own, "SELECT 1", deadline_s=0.2)
        assert isinstance(answer, SqlError) and answer.code == "BUSY" and "busy" in answer.message
        assert slow.is_alive()
        hold.cancel()
        slow.join()
        assert isinstance(select(own, "SELECT 1"), SelectAnswer)


def test_close_kills_every_worker() -> None:
    own = WorkerPool()
    threads = [threading.Thread(target=select, args=(own, SLOW_CALL, 3.0)) for _ in range(2)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while len(own.worker_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    pids = own.worker_pids()
    own.close()
    for thread in threads:
        thread.join(timeout=5)
    assert len(pids) == 2 and wait_gone(pids) == []
    assert select(own, "SELECT 1") == SqlError("UNAVAILABLE", "the SQL engine is shut down.")


def test_a_task_setup_that_fails_is_not_the_answers_fault(box: WorkerPool) -> None:
    answer = select(box, "SELECT 1", setup="CREATE TABLE broken (")
    assert isinstance(answer, SqlError) and answer.code == "UNAVAILABLE" and "OperationalError" in answer.message


def test_memory_jobs_read_the_database_file_read_only(tmp_path: Path) -> None:
    database = Database(tmp_path / "app.db")
    database.migrate()
    conn = open_read_only(database.path)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("DELETE FROM users")
    conn.close()
    with WorkerPool() as own:
        job = MemoryJob(
            database_path=database.path,
            user_id=1,
            sql="SELECT count(*) FROM memories",
            deadline_s=1,
            max_rows=10,
            max_update_rows=5,
        )
        assert run_memory(own, job).rows == [[0]]  # type: ignore[union-attr]


# fetching within a budget -----------------------------------------------------------------


def cursor_of(sql: str) -> sqlite3.Cursor:
    return sqlite3.connect(":memory:").execute(sql)


def test_preview_fetch_stops_at_the_byte_budget() -> None:
    wide = (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 500) SELECT "
        + ", ".join(f"printf('%.*c', 3000, 'x') AS c{i}" for i in range(40))
        + " FROM r"
    )
    fetched = fetch_preview(cursor_of(wide), max_rows=200, budget_bytes=100_000, text_chars=2000)
    assert fetched.truncated_by == "bytes" and 0 < len(fetched.rows) < 200
    assert len(json.dumps(fetched.rows, ensure_ascii=False)) < 100_000 + 3000
    one_row = fetch_preview(cursor_of(wide), max_rows=200, budget_bytes=10_000, text_chars=2000)
    assert len(one_row.rows) == 1 and one_row.rows[0][-1] == "…" and one_row.truncated_by == "bytes"


def test_preview_cells_are_short_and_json_safe() -> None:
    fetched = fetch_preview(cursor_of("SELECT zeroblob(100), printf('%.*c', 50, 'y'), 1.5, NULL"), 10, 10_000, 20)
    assert fetched.rows == [["x'" + "00" * 64 + "'…", "y" * 20 + "…[+30 chars]", 1.5, None]]
    assert fetched.truncated_by == ""


def test_exact_fetch_refuses_what_it_cannot_return_whole() -> None:
    rows = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 20) SELECT n, x'ff' FROM r"
    assert fetch_exact(cursor_of(rows), 20, 10_000)[0] == [1, "ff"]
    with pytest.raises(OverBudget) as too_many:
        fetch_exact(cursor_of(rows), 19, 10_000)
    assert too_many.value.reason == "rows"
    with pytest.raises(OverBudget) as too_big:
        fetch_exact(cursor_of(rows), 20, 200)
    assert too_big.value.reason == "bytes"
