"""Untrusted SQL: `/memory_sql` and the learner tasks' `sql_result` checks (issue 11, class 1).

Each attack is one short statement that is cheap to send and expensive to run: cells of
large blobs (memory), a result of many wide columns (what gets stored), one built-in
function call that runs for a long time inside a single VM step (where a progress handler
never runs), a recursive CTE whose UNION keeps every row (memory inside the engine), an
UPDATE whose WHERE loops (the write lock), and two of them at once. The memory_sql attacks
call the tool directly (`POST /tools/memory_sql`, the same runner as a chat command) except
the one that checks what a chat turn stores; the task attacks submit an answer to a task
with a `sql_result` criterion (`POST /tools/submit`), imported through the CLI on first use.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from testing.attacks import Attack, Outcome, Target
from testing.hostile import ROOT

SQL_DEADLINE_S = 1.0  # SPEC 6a: a query is stopped after 1 second of work (tasks: SQL_TIMEOUT_S)
# the bystander of the UPDATE attack chats as fast as it can: keep it under its turn budget
ENV = {"RATE_LIMITS": "turns=1000/minute,sessions=off,tools=off"}  # each bystander chat opens a session
TASK_ID = "sql_hostile"
TASK_SETUP = "CREATE TABLE pets (name TEXT, kind TEXT); INSERT INTO pets VALUES ('Rex', 'dog'), ('Tom', 'cat');"

_ROWS = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT {rows}) "
BIG_BLOBS = _ROWS.format(rows=50) + "SELECT n, zeroblob(9000000) AS a, zeroblob(9000000) AS b FROM r"
# Each cell just under a 1 MB value cap, twenty of them per row: the size of a row, not of a value.
BLOB_ROWS = _ROWS.format(rows=30) + "SELECT " + ", ".join(f"zeroblob(999000) AS b{i}" for i in range(20)) + " FROM r"
WIDE_COLUMNS = (
    _ROWS.format(rows=200) + "SELECT " + ", ".join(f"printf('%.*c', 3000, 'x') AS c{i}" for i in range(60)) + " FROM r"
)
# ltrim() compares each character of its input with each character of the set: 200,000 x
# 20,000 comparisons inside one function call (about 20 s), on values far below any size cap.
SLOW_CALL = "SELECT length(ltrim(printf('%.*c', 200000, 'a'), printf('%.*c', 20000, 'b') || 'a')) AS name"
# UNION (not UNION ALL) keeps every row in an index to drop duplicates: memory grows inside
# the engine, within single VM steps, until the deadline.
GROWING_CTE = (
    "WITH RECURSIVE r(n, b) AS (SELECT 1, x'00' UNION SELECT n + 1, randomblob(100000) FROM r) SELECT count(*) FROM r"
)
LOOPING_UPDATE = (
    "UPDATE memories SET importance = 5 WHERE id IN (WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL "
    "SELECT n + 1 FROM r) SELECT n FROM r WHERE n < 0)"
)
TASK_BIG_BLOBS = _ROWS.format(rows=250) + "SELECT zeroblob(999000) AS name FROM r"


# --------------------------------------------------------------------------- /memory_sql


def memory_sql(target: Target, sql: str) -> Outcome:
    response = target.post("/tools/memory_sql", json={"sql": sql})
    return _outcome(response)


def _outcome(response: requests.Response, stored_bytes: int = 0) -> Outcome:
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        note = (error.get("code", "") if isinstance(error, dict) else body.get("error_code") or "ok") or "ok"
    except ValueError:
        note = "not JSON"
    return Outcome(response.status_code, len(response.content), str(note), stored_bytes)


def _two_at_once(run: Callable[[Target], Outcome], target: Target) -> Outcome:
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(lambda _: run(target), range(2)))
    worst = max(outcomes, key=lambda outcome: outcome.body_bytes)
    return Outcome(worst.status, worst.body_bytes, " + ".join(o.note for o in outcomes), worst.stored_bytes)


def big_blobs(target: Target) -> Outcome:
    return memory_sql(target, BIG_BLOBS)


def blob_rows(target: Target) -> Outcome:
    return memory_sql(target, BLOB_ROWS)


def wide_columns_through_chat(target: Target) -> Outcome:
    return memory_sql_through_chat(target, WIDE_COLUMNS)


def memory_sql_through_chat(target: Target, sql: str) -> Outcome:
    """The model's command runs in a chat turn; what the turn stored is measured too."""
    target.llm.queue("/memory_sql\n" + sql, "Here is what I found.")
    response = target.post("/chat", json={"message": "show me everything"})
    stored = 0
    if response.ok:
        session = response.json()["session_id"]
        page = target.get(f"/sessions/{session}/messages", params={"limit": 200})
        stored = max((len(json.dumps(m, ensure_ascii=False)) for m in page.json()["messages"]), default=0)
    return _outcome(response, stored)


def slow_call(target: Target) -> Outcome:
    return memory_sql(target, SLOW_CALL)


def growing_cte(target: Target) -> Outcome:
    return memory_sql(target, GROWING_CTE)


def looping_update(target: Target) -> Outcome:
    """Three looping UPDATEs in a row: each would hold the write lock for its whole second."""
    target.post("/tools/memory_sql", json={"sql": "SELECT 1"})  # warm up, outside the loop below
    outcomes = [memory_sql(target, LOOPING_UPDATE) for _ in range(3)]
    return outcomes[-1]


def two_blob_rows(target: Target) -> Outcome:
    return _two_at_once(blob_rows, target)


def two_slow_calls(target: Target) -> Outcome:
    return _two_at_once(slow_call, target)


# --------------------------------------------------------------------------- task sql_result


def task_file() -> dict[str, object]:
    return {
        "project": {"id": "hostile_sql", "title": "Hostile SQL", "description": "a sql_result task to attack"},
        "tasks": [
            {
                "id": TASK_ID,
                "title": "Dogs",
                "priority": 0,
                "acceptance_criteria": [
                    {
                        "type": "sql_result",
                        "description": "names of dogs",
                        "setup_sql": TASK_SETUP,
                        "expected_columns": ["name"],
                        "expected_rows": [["Rex"]],
                    }
                ],
            }
        ],
    }


def ensure_task_started(target: Target) -> None:
    """Import the task (once per server, through the CLI as an operator would) and start it."""
    shown = target.post("/tools/show_task", json={"task_id": TASK_ID})
    if shown.status_code == 404:
        path = Path(target.server.tmp) / "hostile_sql_task.json"
        path.write_text(json.dumps(task_file()))
        subprocess.run(
            [sys.executable, "app.py", "import-tasks", str(path)],
            cwd=ROOT,
            env=target.server.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        shown = target.post("/tools/show_task", json={"task_id": TASK_ID})
    if shown.ok and shown.json().get("status") == "open":
        target.post("/tools/start_task", json={"task_id": TASK_ID}).raise_for_status()


def submit(target: Target, answer: str) -> Outcome:
    """The note says how the answer was graded, e.g. `failed: the query ran longer than 1 s …`."""
    response = target.post("/tools/submit", json={"task_id": TASK_ID, "answer": answer})
    outcome = _outcome(response)
    if response.ok:
        body = response.json()
        checks = body.get("checks") or [{}]
        note = f"{body.get('result')}: {checks[0].get('message', '')}"
        return Outcome(outcome.status, outcome.body_bytes, note[:120])
    return outcome


def task_big_blobs(target: Target) -> Outcome:
    ensure_task_started(target)
    return submit(target, TASK_BIG_BLOBS)


def task_slow_call(target: Target) -> Outcome:
    ensure_task_started(target)
    return submit(target, SLOW_CALL)


def task_growing_cte(target: Target) -> Outcome:
    ensure_task_started(target)
    return submit(target, GROWING_CTE)


def task_two_big_blobs(target: Target) -> Outcome:
    ensure_task_started(target)
    return _two_at_once(lambda t: submit(t, TASK_BIG_BLOBS), target)


ATTACKS: list[Attack] = [
    Attack("memory_sql: SELECT of 9 MB zeroblob cells", big_blobs, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: rows of twenty 1 MB zeroblob cells", blob_rows, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: 60 wide columns x 200 rows, through chat", wide_columns_through_chat, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: one slow built-in call (ltrim)", slow_call, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: recursive CTE whose UNION grows", growing_cte, SQL_DEADLINE_S, ENV),
    Attack("memory_sql: 3 UPDATEs whose WHERE loops", looping_update, 3 * SQL_DEADLINE_S, ENV),
    Attack("memory_sql: two SELECTs of 1 MB-cell rows at once", two_blob_rows, 2 * SQL_DEADLINE_S, ENV),
    Attack("memory_sql: two slow built-in calls at once", two_slow_calls, 2 * SQL_DEADLINE_S, ENV),
    Attack("task sql_result: SELECT of large zeroblob cells", task_big_blobs, SQL_DEADLINE_S, ENV),
    Attack("task sql_result: one slow built-in call (ltrim)", task_slow_call, SQL_DEADLINE_S, ENV),
    Attack("task sql_result: recursive CTE whose UNION grows", task_growing_cte, SQL_DEADLINE_S, ENV),
    Attack("task sql_result: two large-blob answers at once", task_two_big_blobs, 2 * SQL_DEADLINE_S, ENV),
]
