"""Untrusted SQL against the real server: each attack of `testing/attacks/sql.py` (`/memory_sql`
and a task's `sql_result` check) gets a short, clear refusal or a bounded answer; the server's
memory and CPU stay bounded (the work happens in SQL workers that are killed at the deadline);
what a chat turn stores is capped; and another user keeps being served meanwhile: their own
`/memory_sql` queries, or, during the looping UPDATEs, chat turns that store messages and
would wait on any write lock the attack held.

Each attack runs against a server on SQLite and, in PostgreSQL's dialect
(`testing/attacks/sql_pg.py`), against a server whose DATABASE_URL is PostgreSQL: there the
work happens in PostgreSQL, bounded by the restricted role's limits (`statement_timeout`,
`temp_file_limit`, the row check), and the answers carry the same codes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from testing.attacks import Attack, Target, hostile_target
from testing.attacks.sql import ATTACKS, ENV
from testing.attacks.sql_pg import PG_ATTACKS
from testing.hostile import Bystander, PeakMemory, process_tree
from testing.waiting import wait_until
from tests.pg_support import MIGRATED_TEMPLATE, PgCluster, migrate_template

pytestmark = pytest.mark.slow

BY_NAME = {attack.name: attack for attack in ATTACKS}
PG_BY_NAME = {attack.name: attack for attack in PG_ATTACKS}
REFUSED = {400: "VALIDATION_FAILED", 504: "TIMEOUT"}  # a direct /tools/memory_sql call
# what each attack must get: (HTTP status, words in the note)
EXPECTED: dict[str, tuple[int, str]] = {
    "memory_sql: SELECT of 9 MB zeroblob cells": (400, "VALIDATION_FAILED"),
    "memory_sql: rows of twenty 1 MB zeroblob cells": (400, "VALIDATION_FAILED"),
    "memory_sql: 60 wide columns x 200 rows, through chat": (200, "ok"),
    "memory_sql: one slow built-in call (ltrim)": (504, "TIMEOUT"),
    "memory_sql: recursive CTE whose UNION grows": (400, "VALIDATION_FAILED"),
    "memory_sql: 3 UPDATEs whose WHERE loops": (504, "TIMEOUT"),
    "memory_sql: two SELECTs of 1 MB-cell rows at once": (400, "VALIDATION_FAILED + VALIDATION_FAILED"),
    "memory_sql: two slow built-in calls at once": (504, "TIMEOUT + TIMEOUT"),
    "task sql_result: SELECT of large zeroblob cells": (200, "failed: SQL error: the result is larger than 1 MB"),
    "task sql_result: one slow built-in call (ltrim)": (200, "failed: SQL error: the query ran longer than 1 s"),
    "task sql_result: recursive CTE whose UNION grows": (200, "failed: SQL error: the query needs more memory"),
    "task sql_result: two large-blob answers at once": (200, "failed: SQL error: the result is larger than 1 MB"),
}
PG_EXPECTED: dict[str, tuple[int, str]] = {
    "memory_sql: SELECT of 9 MB cells": (400, "VALIDATION_FAILED"),
    "memory_sql: rows of twenty 1 MB cells": (400, "VALIDATION_FAILED"),
    "memory_sql: 60 wide columns x 200 rows, through chat": (200, "ok"),
    "memory_sql: a count of ten billion rows": (504, "TIMEOUT"),
    "memory_sql: recursive CTE whose UNION grows": (400, "VALIDATION_FAILED"),
    "memory_sql: 3 UPDATEs whose WHERE loops": (504, "TIMEOUT"),
    "memory_sql: two SELECTs of 1 MB-cell rows at once": (400, "VALIDATION_FAILED + VALIDATION_FAILED"),
    "memory_sql: two long counts at once": (504, "TIMEOUT + TIMEOUT"),
}
CASES = [("sqlite", name) for name in BY_NAME] + [("postgres", name) for name in PG_BY_NAME]
STORED_CAP = 64 * 1024 + 256 * 1024  # SPEC 12: contract text and structured output of one result


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with hostile_target(Path(tmp_path_factory.mktemp("sql")), ENV) as found:
        found.post("/chat", token=found.bystander, json={"message": "hello"}).raise_for_status()
        yield found


@pytest.fixture(scope="module")
def pg_target(tmp_path_factory: pytest.TempPathFactory, pg_cluster: PgCluster) -> Iterator[Target]:
    """The same server on a PostgreSQL database of its own (copied from the migrated template)."""
    name, url = pg_cluster.fresh_database(pg_cluster.template(MIGRATED_TEMPLATE, migrate_template))
    try:
        with hostile_target(Path(tmp_path_factory.mktemp("sql_pg")), {**ENV, "DATABASE_URL": url}) as found:
            found.post("/chat", token=found.bystander, json={"message": "hello"}).raise_for_status()
            yield found
    finally:
        pg_cluster.drop_database(name)


def target_of(request: pytest.FixtureRequest, engine: str) -> Target:
    target: Target = request.getfixturevalue("target" if engine == "sqlite" else "pg_target")
    return target


def bystander_request(target: Target, name: str, statuses: list[int]) -> Callable[[], requests.Response]:
    """Bob's own work: chat turns (which write) during the UPDATEs, else his own /memory_sql."""

    def request() -> requests.Response:
        if "UPDATE" in name:
            response = target.post("/chat", token=target.bystander, json={"message": "hi"}, timeout=10)
        else:
            response = target.post(
                "/tools/memory_sql",
                token=target.bystander,
                timeout=10,
                json={"sql": "SELECT role, count(*) FROM messages GROUP BY role"},
            )
        statuses.append(response.status_code)
        return response

    return request


def test_every_attack_has_an_expectation() -> None:
    assert set(EXPECTED) == set(BY_NAME) and set(PG_EXPECTED) == set(PG_BY_NAME)


@pytest.mark.parametrize(("engine", "name"), CASES)
def test_attack_is_bounded_and_others_keep_working(request: pytest.FixtureRequest, engine: str, name: str) -> None:
    target = target_of(request, engine)
    attack: Attack = (BY_NAME if engine == "sqlite" else PG_BY_NAME)[name]
    statuses: list[int] = []
    cpu_before = target.server.cpu_s()
    with (
        PeakMemory(target.server) as memory,
        Bystander(target.server, request=bystander_request(target, name, statuses)) as bystander,
    ):
        outcome = attack.run(target)
    cpu = target.server.cpu_s() - cpu_before

    status, words = (EXPECTED if engine == "sqlite" else PG_EXPECTED)[name]
    assert outcome.status == status and words in outcome.note, outcome
    if name.startswith("memory_sql") and status != 200:
        assert outcome.body_bytes < 1000 and set(outcome.note.split(" + ")) == {REFUSED[status]}, outcome
    assert outcome.body_bytes < STORED_CAP and outcome.stored_bytes < STORED_CAP, outcome
    assert memory.added_mb < 100, f"{memory.added_mb:.1f} MB"
    assert cpu < attack.deadline_s + 2, f"{cpu:.2f} s of CPU"
    assert bystander.failures == [] and statuses and set(statuses) == {200}, (bystander.failures, set(statuses))
    # that a turn that writes never waits for an UPDATE's WHERE (it used to wait ~3 s) is proved without a
    # clock in test_memory_sql.py::test_a_looping_update_holds_no_write_lock (a writer that never waits)


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
def test_the_wide_result_stored_by_chat_is_capped(request: pytest.FixtureRequest, engine: str) -> None:
    attacks = BY_NAME if engine == "sqlite" else PG_BY_NAME
    outcome = attacks["memory_sql: 60 wide columns x 200 rows, through chat"].run(target_of(request, engine))
    assert 10_000 < outcome.stored_bytes < 200_000  # a bounded preview, not the 24 MB it once stored


def test_ordinary_queries_stay_fast(target: Target) -> None:
    sql = {"sql": "SELECT id, role, substr(content, 1, 40) FROM messages ORDER BY id DESC LIMIT 20"}
    target.post("/tools/memory_sql", json=sql).raise_for_status()
    server = target.server.process.pid
    workers = set(process_tree(server)) - {server}
    for _ in range(20):
        target.post("/tools/memory_sql", json=sql).raise_for_status()
        assert set(process_tree(server)) - {server} == workers  # the same warm worker: no process start per query
    assert workers


def test_workers_stop_with_the_server(tmp_path: Path) -> None:
    with hostile_target(tmp_path, ENV) as own:
        assert own.post("/tools/memory_sql", json={"sql": "SELECT count(*) FROM memories"}).ok
        workers = [pid for pid in process_tree(own.server.process.pid) if pid != own.server.process.pid]
        assert workers
    wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in workers), "a worker outlived its server")
