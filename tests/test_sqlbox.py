"""The SQL box: limits that hold inside one SQLite call, workers that are killed, reused and
never left behind. Real worker processes throughout (no stand-ins)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cancellation import Cancelled, CancelToken
from sqlbox.fetch import OverBudget, fetch_exact, fetch_preview
from sqlbox.memory_engine import open_read_only
from sqlbox.pool import ROOT, SqlBox
from sqlbox.protocol import MemoryJob, SelectAnswer, SelectJob, SqlError
from storage.db import Database
from testing.attacks.sql import BLOB_ROWS, GROWING_CTE, SLOW_CALL

SETUP = "CREATE TABLE t (x INTEGER, s TEXT); INSERT INTO t VALUES (1, 'a'), (2, 'b');"


def select(box: SqlBox, sql: str, deadline_s: float = 1.0, setup: str = SETUP) -> SelectAnswer | SqlError:
    return box.run_select(SelectJob(setup_sql=setup, sql=sql, deadline_s=deadline_s, max_rows=1000))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() else "X"
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


@pytest.fixture(scope="module")
def box():
    with SqlBox() as shared:
        yield shared


def test_an_ordinary_query_reuses_a_warm_worker(box: SqlBox) -> None:
    assert select(box, "SELECT x, s FROM t ORDER BY x") == SelectAnswer(columns=["x", "s"], rows=[[1, "a"], [2, "b"]])
    pids = box.worker_pids()
    started = time.perf_counter()
    for _ in range(20):
        assert isinstance(select(box, "SELECT count(*) FROM t"), SelectAnswer)
    assert (time.perf_counter() - started) / 20 < 0.05  # no process start per call
    assert box.worker_pids() == pids and len(pids) == 1


@pytest.mark.parametrize("sql, code, words", [
    ("SELECT zeroblob(2000000)", "TOO_LARGE", "too big"),
    ("SELECT replace(printf('%.*c', 600000, 'x'), 'x', 'xx')", "TOO_LARGE", "too big"),
    ("SELECT " + ", ".join(f"{i} AS c{i}" for i in range(65)), "TOO_LARGE", "too many columns"),
    (BLOB_ROWS, "TOO_LARGE", "memory"),  # each value under the cap, the row over the heap limit
    (GROWING_CTE, "TOO_LARGE", "memory"),  # UNION's dedupe index inside the engine
    ("SELECT 'a' LIKE printf('%.*c', 2000, '%')", "VALIDATION_FAILED", "LIKE or GLOB pattern too complex"),
    ("SELECT 1" + " + 1" * 300, "VALIDATION_FAILED", "depth 200"),
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r", "TIMEOUT", "1 s"),
])
def test_engine_limits(box: SqlBox, sql: str, code: str, words: str) -> None:
    started = time.monotonic()
    answer = select(box, sql)
    assert isinstance(answer, SqlError) and answer.code == code and words in answer.message, answer
    assert time.monotonic() - started < 2.5


def test_one_slow_function_call_is_killed_at_the_deadline(box: SqlBox) -> None:
    select(box, "SELECT 1")
    before = box.worker_pids()
    started = time.monotonic()
    answer = select(box, SLOW_CALL, deadline_s=0.5)
    elapsed = time.monotonic() - started
    assert isinstance(answer, SqlError) and answer.code == "TIMEOUT" and "0.5 s" in answer.message
    assert 0.5 <= elapsed < 1.5
    assert wait_gone(before) == []  # the worker that ran it is gone, not left computing
    assert isinstance(select(box, "SELECT 1"), SelectAnswer)  # and a new one serves the next job


def test_a_worker_has_hard_limits(box: SqlBox) -> None:
    select(box, "SELECT 1")
    limits = Path(f"/proc/{box.worker_pids()[0]}/limits").read_text()
    address_space = next(line for line in limits.splitlines() if line.startswith("Max address space"))
    assert int(address_space.split()[3]) < 512 * 1024 * 1024
    cpu = next(line for line in limits.splitlines() if line.startswith("Max cpu time"))
    assert cpu.split()[3] != "unlimited"


def test_cancel_kills_the_worker_at_once() -> None:
    token = CancelToken()
    with SqlBox() as own:
        threading.Timer(0.3, token.cancel).start()
        started = time.monotonic()
        with pytest.raises(Cancelled):
            own.run_select(SelectJob(setup_sql="", sql=SLOW_CALL, deadline_s=5.0, max_rows=10), token)
        assert time.monotonic() - started < 1.5
        assert own.worker_pids() == []


def test_jobs_wait_for_a_free_worker_within_their_deadline() -> None:
    with SqlBox(max_workers=1) as own:
        slow = threading.Thread(target=select, args=(own, SLOW_CALL, 1.0))
        slow.start()
        time.sleep(0.3)
        answer = select(own, "SELECT 1", deadline_s=0.2)
        assert isinstance(answer, SqlError) and answer.code == "UNAVAILABLE" and "busy" in answer.message
        slow.join()
        assert isinstance(select(own, "SELECT 1"), SelectAnswer)


def test_close_kills_every_worker() -> None:
    own = SqlBox()
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


def test_workers_exit_when_their_server_dies(tmp_path: Path) -> None:
    """A server killed with SIGKILL runs no clean-up: its workers see end-of-file and exit."""
    program = (
        "import sys, time; sys.path.insert(0, sys.argv[1])\n"
        "from sqlbox.pool import SqlBox\nfrom sqlbox.protocol import SelectJob\n"
        "box = SqlBox()\nbox.run_select(SelectJob(setup_sql='', sql='SELECT 1', deadline_s=1, max_rows=1))\n"
        "print(box.worker_pids()[0], flush=True)\ntime.sleep(60)\n"
    )
    server = subprocess.Popen([sys.executable, "-c", program, str(ROOT)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        worker = int(server.stdout.readline())
        assert alive(worker)
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
    assert wait_gone([worker]) == []


def test_a_task_setup_that_fails_is_not_the_answers_fault(box: SqlBox) -> None:
    answer = select(box, "SELECT 1", setup="CREATE TABLE broken (")
    assert isinstance(answer, SqlError) and answer.code == "UNAVAILABLE" and "OperationalError" in answer.message


def test_memory_jobs_read_the_database_file_read_only(tmp_path: Path) -> None:
    database = Database(tmp_path / "app.db")
    database.migrate()
    conn = open_read_only(database.path)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("DELETE FROM users")
    conn.close()
    with SqlBox() as own:
        job = MemoryJob(database_path=database.path, user_id=1, sql="SELECT count(*) FROM memories", deadline_s=1,
                        max_rows=10, max_update_rows=5)
        assert own.run_memory(job).rows == [[0]]  # type: ignore[union-attr]


# fetching within a budget -----------------------------------------------------------------


def cursor_of(sql: str) -> sqlite3.Cursor:
    return sqlite3.connect(":memory:").execute(sql)


def test_preview_fetch_stops_at_the_byte_budget() -> None:
    wide = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 500) SELECT " + ", ".join(
        f"printf('%.*c', 3000, 'x') AS c{i}" for i in range(40)) + " FROM r"
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


def test_a_worker_gets_none_of_the_servers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_API_KEY", "sk-secret")
    with SqlBox() as own:
        select(own, "SELECT 1")
        environ = Path(f"/proc/{own.worker_pids()[0]}/environ").read_bytes()
    assert b"sk-secret" not in environ and b"LLM_API_KEY" not in environ
