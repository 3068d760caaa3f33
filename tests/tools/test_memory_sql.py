"""`/memory_sql`: what the model may read and change, and that refusals change nothing.

Most tests run on both engines (`store`, tests/pg_support.py: SQLite, then PostgreSQL), a few
about SQLite's own mechanics (its worker, its authorizer's words, its FTS5 tables) on `db`; what
only PostgreSQL shows (its catalogs, the restricted role) is in test_memory_sql_pg.py.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bounded.pool import WorkerPool
from bounded.sql_values import Change
from foundation.cancellation import Cancelled, CancelToken
from storage.connection import Store
from storage.db import Database, utc_now
from storage.pg_confinement import read_login
from testing.attacks.sql import BLOB_ROWS, LOOPING_UPDATE, SLOW_CALL, WIDE_COLUMNS
from testing.fake_llm import FakeLLMServer
from testing.waiting import ReapedCpu, wait_until
from tests.conftest import new_token
from tools.base import ErrorCode, ToolContext, ToolFailure
from tools.memory_sql import (
    MEMORY_SQL_TOOL,
    RENDERED_MAX_CHARS,
    MemorySqlInput,
    MemorySqlOutput,
    apply_changes,
    memory_sql_handler,
    run_memory_sql,
)

ALICE, BOB = 1, 2
DENIED, INVALID, TIMEOUT = ErrorCode.PERMISSION_DENIED, ErrorCode.VALIDATION_FAILED, ErrorCode.TIMEOUT
SNAPSHOT_TABLES = (
    "users",
    "api_tokens",
    "sessions",
    "chat_messages",
    "user_memories",
    "_migrations",
    "user_memories_fts_data",
    "user_memories_fts_docsize",
    "chat_messages_fts_data",
)


def seed(db: Store, *, alice_messages: int = 4, alice_memories: int = 3) -> dict[str, list[int]]:
    """Two users, each with a session, messages and memories; returns the row ids by owner."""
    now = utc_now()
    ids: dict[str, list[int]] = {"alice_memories": [], "bob_memories": []}
    with db.connection() as conn:
        for user_id, name in ((ALICE, "alice"), (BOB, "bob")):
            conn.execute("INSERT INTO users (id, name, created_at) VALUES (?, ?, ?)", (user_id, name, now))
            conn.execute(
                "INSERT INTO api_tokens (user_id, token_hash, created_at) VALUES (?, ?, ?)",
                (user_id, f"hash-of-{name}", now),
            )
            conn.execute(
                "INSERT INTO sessions (id, user_id, name, created_at, updated_at) VALUES (?, ?, 'chat', ?, ?)",
                (f"s-{name}", user_id, now, now),
            )
        texts = ["please delete this draft", "hello there", "SELECT is my favourite word", "bye"]
        for number in range(alice_messages):
            conn.execute(
                "INSERT INTO chat_messages (session_id, user_id, role, content, meta, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                ("s-alice", ALICE, "user" if number % 2 == 0 else "assistant", texts[number % 4], '{"k": 1}', now),
            )
        conn.execute(
            "INSERT INTO chat_messages (session_id, user_id, role, content, created_at) VALUES "
            "('s-bob', ?, 'user', 'bob secret message', ?)",
            (BOB, now),
        )
        for owner, user_id, count, stem in (
            ("alice", ALICE, alice_memories, "alice likes tea"),
            ("bob", BOB, 2, "bob secret memory"),
        ):
            for number in range(count):
                row = conn.execute(
                    "INSERT INTO user_memories (user_id, content, importance, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?) RETURNING id",
                    (user_id, f"{stem} {number}", 1 + number % 10, now, now),
                ).fetchone()
                ids[f"{owner}_memories"].append(int(row[0]))
    return ids


PG_TABLES = ("users", "api_tokens", "sessions", "chat_messages", "user_memories", "_migrations", "memory_sql.bindings")
PG_SCHEMA = {  # digests computed by the server: the whole catalog compared in one row each
    "relations": "SELECT count(*), md5(string_agg(n.nspname || '.' || c.relname || c.relkind::text || coalesce(c.relacl::text, ''), "
    "',' ORDER BY n.nspname, c.relname)) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname <> 'pg_toast'",  # by name: a view made again after a later step's index is the same view
    "functions": "SELECT count(*), md5(string_agg(p.oid::text || p.proname || coalesce(p.proacl::text, ''), ',' "
    "ORDER BY p.oid)) FROM pg_proc p",
    "roles": "SELECT rolname, rolsuper, rolinherit, rolcanlogin FROM pg_roles ORDER BY 1",
    "settings": "SELECT setdatabase, setrole, setconfig::text FROM pg_db_role_setting ORDER BY 1, 2",
    "large_objects": "SELECT oid FROM pg_largeobject_metadata ORDER BY 1",
    "databases": "SELECT datname, datacl::text FROM pg_database ORDER BY 1",
    "namespaces": "SELECT nspname, nspacl::text FROM pg_namespace ORDER BY 1",
}


def snapshot(db: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table that matters, plus the schema: equal before and after = no change."""
    if db.dialect == "postgresql":  # the schema here is also every function's and role's rights
        with db.connection() as conn:
            state = {t: [tuple(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY 1")] for t in PG_TABLES}
            state.update({name: [tuple(r) for r in conn.execute(sql)] for name, sql in PG_SCHEMA.items()})
        return state
    with db.connection() as conn:
        state = {t: [tuple(r) for r in conn.execute(f"SELECT * FROM {t} ORDER BY rowid")] for t in SNAPSHOT_TABLES}
        state["schema"] = [tuple(r) for r in conn.execute("SELECT type, name, sql FROM sqlite_schema ORDER BY name")]
    return state


@pytest.fixture
def db(tmp_path: Path) -> Database:
    database = Database(tmp_path / "app.db")
    database.migrate()
    return database


@pytest.fixture
def ids(db: Database) -> dict[str, list[int]]:
    return seed(db)


@pytest.fixture
def store_ids(store: Store) -> dict[str, list[int]]:
    """`ids` on each backend (`store` from tests/pg_support.py: SQLite, then PostgreSQL)."""
    return seed(store)


def assert_refused(db: Store, sql: str, codes: set[ErrorCode], **kwargs: Any) -> ToolFailure:
    before = snapshot(db)
    with pytest.raises(ToolFailure) as caught:
        run_memory_sql(db, ALICE, sql, **kwargs)
    assert caught.value.code in codes, caught.value.message
    assert snapshot(db) == before
    return caught.value


REFUSED: list[tuple[str, ErrorCode]] = [
    # schema and pragmas
    ("SELECT * FROM sqlite_master", DENIED),
    ("SELECT name FROM sqlite_schema", DENIED),
    ("SELECT * FROM sqlite_temp_master", DENIED),
    ("SELECT sql FROM temp.sqlite_schema", DENIED),
    ("SELECT * FROM pragma_table_info('users')", DENIED),
    ("SELECT count(*) FROM pragma_table_info('chat_messages')", DENIED),
    ("SELECT * FROM pragma_database_list", DENIED),
    ("PRAGMA table_info(users)", DENIED),
    ("PRAGMA writable_schema = 1", DENIED),
    ("SELECT * FROM json_each((SELECT group_concat(sql) FROM sqlite_master))", DENIED),
    # attach, extensions, tokenizers, other non-core functions
    ("ATTACH DATABASE ':memory:' AS x", DENIED),
    ("ATTACH DATABASE '{tmp}/evil.db' AS evil", DENIED),
    ("DETACH DATABASE main", DENIED),
    ("SELECT load_extension('x')", DENIED),
    ("SELECT fts3_tokenizer('simple')", DENIED),
    ("SELECT sqlite_version()", DENIED),
    # base tables, other columns, main-schema names
    ("SELECT * FROM chat_messages", DENIED),
    ("SELECT * FROM main.chat_messages", DENIED),
    ("SELECT content FROM user_memories", DENIED),
    ("SELECT * FROM users", DENIED),
    ("SELECT token_hash FROM api_tokens", DENIED),
    ("SELECT * FROM sessions", DENIED),
    ("SELECT count(*) FROM users", DENIED),
    ("SELECT 1 FROM chat_messages, (SELECT 2)", DENIED),
    ("SELECT * FROM main.messages", INVALID),
    ("SELECT user_id FROM messages", INVALID),
    ("SELECT meta FROM messages", INVALID),
    # FTS index and its shadow tables
    ("SELECT * FROM user_memories_fts", DENIED),
    ("SELECT rowid FROM user_memories_fts WHERE user_memories_fts MATCH 'bob'", DENIED),
    ("SELECT * FROM user_memories_fts_data", DENIED),
    ("SELECT * FROM user_memories_fts_docsize", DENIED),
    ("SELECT * FROM user_memories_fts_idx", DENIED),
    ("SELECT * FROM chat_messages_fts_config", DENIED),
    ("UPDATE memories SET content = (SELECT group_concat(block) FROM user_memories_fts_data)", DENIED),
    ("UPDATE memories SET importance = (SELECT count(*) FROM user_memories_fts_docsize)", DENIED),
    ("INSERT INTO user_memories_fts (user_memories_fts) VALUES ('delete-all')", DENIED),
    ("DELETE FROM user_memories_fts_docsize", DENIED),
    # writes other than UPDATE memories SET content/importance
    ("UPDATE messages SET role = 'system'", DENIED),
    ("UPDATE memories SET id = 999", DENIED),
    ("UPDATE memories SET created_at = 'yesterday'", DENIED),
    ("UPDATE memories SET content = 'x' WHERE user_id = 2", INVALID),
    ("UPDATE user_memories SET content = 'x'", DENIED),
    ("UPDATE memories SET content = (SELECT token_hash FROM api_tokens LIMIT 1)", DENIED),
    ("UPDATE memories SET content = 'x' WHERE id IN (SELECT id FROM user_memories)", DENIED),
    ("UPDATE memories SET content = users.name FROM users WHERE users.id = 2", DENIED),
    ("UPDATE memories SET importance = 2 RETURNING id", INVALID),
    ("INSERT INTO memories (content) VALUES ('x')", DENIED),
    ("INSERT INTO user_memories (user_id, content, created_at, updated_at) VALUES (1, 'x', 't', 't')", DENIED),
    ("REPLACE INTO user_memories (id, user_id, content, created_at, updated_at) VALUES (1, 1, 'x', 't', 't')", DENIED),
    ("DELETE FROM memories", DENIED),
    ("DELETE FROM user_memories", DENIED),
    # DDL, maintenance, transactions
    ("CREATE TABLE t (x)", DENIED),
    ("CREATE TEMP TABLE t (x)", DENIED),
    ("CREATE TEMP VIEW v AS SELECT * FROM user_memories", DENIED),
    ("CREATE TEMP TRIGGER t AFTER UPDATE ON user_memories BEGIN DELETE FROM users; END", DENIED),
    ("CREATE VIRTUAL TABLE v USING fts5(x)", DENIED),
    ("DROP VIEW messages", DENIED),
    ("DROP TABLE user_memories", DENIED),
    ("ALTER TABLE user_memories ADD COLUMN x", DENIED),
    ("ALTER TABLE memories RENAME TO m", INVALID),
    ("VACUUM", DENIED),
    ("VACUUM INTO '{tmp}/copy.db'", DENIED),
    ("ANALYZE", DENIED),
    ("REINDEX", DENIED),
    ("REINDEX user_memories", DENIED),
    ("BEGIN", DENIED),
    ("COMMIT", DENIED),
    ("ROLLBACK", DENIED),
    ("SAVEPOINT s", DENIED),
    ("RELEASE s", DENIED),
    # several statements, comments and case tricks, name shadowing
    ("SELECT 1; DELETE FROM memories", INVALID),
    ("SELECT * FROM memories; DROP TABLE users", INVALID),
    ("SELECT 1;;", INVALID),
    ("SELECT * FROM memories -- hi\n; DELETE FROM memories", INVALID),
    ("sElEcT * FrOm SqLiTe_MaStEr", DENIED),
    ("/* harmless */ SELECT * FROM users", DENIED),
    ("SELECT/**/token_hash/**/FROM/**/api_tokens", DENIED),
    ('SELECT * FROM "users"', DENIED),
    ("SELECT * FROM [api_tokens]", DENIED),
    ("SELECT * FROM `sessions`", DENIED),
    ("WITH messages AS (SELECT token_hash AS content FROM api_tokens) SELECT * FROM messages", DENIED),
    ("WITH memories AS (SELECT * FROM user_memories) SELECT * FROM memories", DENIED),
    ("SELECT * FROM (SELECT * FROM users) AS messages", DENIED),
    (
        "WITH RECURSIVE users(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM users LIMIT 3) SELECT count(*) FROM users",
        DENIED,
    ),
    ("EXPLAIN SELECT 1", INVALID),
    ("EXPLAIN QUERY PLAN SELECT * FROM users", INVALID),
    # bad values and sizes
    ("UPDATE memories SET importance = 11", INVALID),
    ("UPDATE memories SET importance = 'high'", INVALID),
    ("UPDATE memories SET importance = 2.5", INVALID),
    ("UPDATE memories SET content = '   '", INVALID),
    ("UPDATE memories SET content = NULL", INVALID),
    ("UPDATE memories SET content = printf('%.*c', 3000, 'x')", INVALID),
    ("SELECT zeroblob(2000000000)", INVALID),
    ("SELECT", INVALID),
    ("   ", INVALID),
    ("SELECT 1\x00; DELETE FROM memories", INVALID),
]


# Where PostgreSQL's answer differs from SQLite's for the same text, and why: SQLite's own
# dialect (PRAGMA, ATTACH, MATCH, REPLACE INTO, [names], untyped columns) is a syntax error for
# PostgreSQL; a statement PostgreSQL parses but will not plan (ALTER, EXPLAIN) is refused as
# "only SELECT or UPDATE"; an unknown schema or function is "not available" (the role cannot
# tell a missing object from a hidden one).
PG_CODES: dict[str, ErrorCode] = {
    **dict.fromkeys(
        (
            "PRAGMA table_info(users)",
            "PRAGMA writable_schema = 1",
            "ATTACH DATABASE ':memory:' AS x",
            "ATTACH DATABASE '{tmp}/evil.db' AS evil",
            "DETACH DATABASE main",
            "SELECT 1 FROM chat_messages, (SELECT 2)",
            "SELECT rowid FROM user_memories_fts WHERE user_memories_fts MATCH 'bob'",
            "REPLACE INTO user_memories (id, user_id, content, created_at, updated_at) VALUES (1, 1, 'x', 't', 't')",
            "CREATE TABLE t (x)",
            "CREATE TEMP TABLE t (x)",
            "CREATE TEMP TRIGGER t AFTER UPDATE ON user_memories BEGIN DELETE FROM users; END",
            "CREATE VIRTUAL TABLE v USING fts5(x)",
            "ALTER TABLE user_memories ADD COLUMN x",
            "VACUUM INTO '{tmp}/copy.db'",
            "REINDEX",
            "REINDEX user_memories",
            "SELECT * FROM [api_tokens]",
            "SELECT * FROM `sessions`",
            "WITH RECURSIVE users(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM users LIMIT 3) SELECT count(*) FROM users",
        ),
        INVALID,
    ),
    "SELECT * FROM main.messages": DENIED,
    "ALTER TABLE memories RENAME TO m": DENIED,
    "EXPLAIN SELECT 1": DENIED,
    "UPDATE memories SET content = printf('%.*c', 3000, 'x')": DENIED,
    "SELECT zeroblob(2000000000)": DENIED,
}
PG_VALID = {"SELECT 1;;", "SELECT"}  # PostgreSQL: an empty statement after `;`, a SELECT of no columns


@pytest.mark.parametrize(("sql", "code"), REFUSED)
def test_refused_and_nothing_changed(
    store: Store, store_ids: dict[str, list[int]], tmp_path: Path, sql: str, code: ErrorCode
) -> None:
    if store.dialect == "postgresql":
        if sql in PG_VALID:
            assert snapshot(store) == snapshot(store) and run_memory_sql(store, ALICE, sql).kind == "select"
            return
        code = PG_CODES.get(sql, code)
    failure = assert_refused(store, sql.replace("{tmp}", str(tmp_path)), {code})
    assert failure.message
    assert not (tmp_path / "evil.db").exists() and not (tmp_path / "copy.db").exists()


def test_refusal_names_what_was_refused(db: Database, ids: dict[str, list[int]]) -> None:
    failure = assert_refused(db, "SELECT * FROM sqlite_master", {DENIED})
    assert "sqlite_master is not available" in failure.message
    assert "memories(id, content, importance, created_at, updated_at)" in failure.message
    assert "load_extension" in assert_refused(db, "SELECT load_extension('x')", {DENIED}).message
    assert "memories.id" in assert_refused(db, "UPDATE memories SET id = 5", {DENIED}).message
    assert "one statement" in assert_refused(db, "SELECT 1; SELECT 2", {INVALID}).message
    assert "syntax error" in assert_refused(db, "SELEC 1", {INVALID}).message


TIMEOUTS = [
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 5000) SELECT count(*) FROM r a, r b, r c",
    "SELECT count(*) FROM messages a, messages b, messages c, messages d, messages e, messages f, messages g, "
    "messages h, messages i, messages j, messages k, messages l",
    "UPDATE memories SET importance = 2 WHERE id IN "
    "(WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r WHERE n < 0)",
]


PG_TIMEOUTS = [
    "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
    "SELECT count(*) FROM messages a, messages b, messages c, messages d, messages e, messages f, messages g, "
    "messages h, messages i, messages j, messages k, messages l",
    "UPDATE memories SET importance = 2 WHERE id IN "
    "(SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b)",
]


@pytest.mark.parametrize(
    ("backend", "sql"), [("sqlite", sql) for sql in TIMEOUTS] + [("postgresql", sql) for sql in PG_TIMEOUTS]
)
def test_runaway_statements_stop_at_the_deadline(store: Store, store_ids: dict[str, list[int]], sql: str) -> None:
    """Each runs for ever (or for hours). SQLite: its one-off worker is reaped in the call, so the
    CPU it burnt is known: far under RLIMIT_CPU's backstop (8 s), which a missing deadline would
    reach. PostgreSQL: the role's backend is gone afterwards, no query of it left running or bound."""
    started = time.monotonic()
    with ReapedCpu() as cpu:
        failure = assert_refused(store, sql, {TIMEOUT}, deadline_s=0.3)
    assert "0.3 s" in failure.message and cpu.seconds < 3, cpu.seconds
    if store.dialect == "postgresql":
        assert time.monotonic() - started < 2
        with store.connection() as conn:
            login = read_login(conn)
            assert login is not None
            query = "SELECT count(*) FROM pg_stat_activity WHERE usename = ?"
            # the client closed the role's connection; its backend exits right after (asynchronously)
            wait_until(lambda: conn.execute(query, (login.role,)).fetchone()[0] == 0, "the role's backend gone", 2.0)
            assert conn.execute("SELECT count(*) FROM memory_sql.bindings").fetchone()[0] == 0


def test_cancel_stops_the_statement(store: Store, store_ids: dict[str, list[int]]) -> None:
    token = CancelToken()
    threading.Timer(0.2, token.cancel).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        run_memory_sql(store, ALICE, RUNAWAY[store.dialect], deadline_s=5.0, cancel=token)
    assert time.monotonic() - started < 2


# A statement that runs for ever on each engine (PostgreSQL would stop TIMEOUTS[0], whose
# worktable grows, at temp_file_limit before the second is up: tests/tools/test_memory_sql_pg.py)
RUNAWAY = {
    "sqlite": TIMEOUTS[0],
    "postgresql": "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b",
}
AGGREGATE = {"sqlite": "group_concat(content)", "postgresql": "string_agg(content, ',')"}


def test_default_deadline_is_one_second(store: Store, store_ids: dict[str, list[int]]) -> None:
    started = time.monotonic()
    failure = assert_refused(store, RUNAWAY[store.dialect], {TIMEOUT})
    assert time.monotonic() - started >= 0.9
    assert "1 s" in failure.message and "LIMIT" in failure.message  # the message names the deadline it enforced


def test_views_show_only_this_users_rows(store: Store, store_ids: dict[str, list[int]]) -> None:
    db, ids = store, store_ids
    messages = run_memory_sql(db, ALICE, "SELECT * FROM messages ORDER BY id")
    assert messages.columns == ["id", "session_id", "role", "content", "created_at"]
    assert {row[1] for row in messages.rows} == {"s-alice"} and messages.row_count == 4
    schema = "temp" if db.dialect == "sqlite" else "memory_sql"
    memories = run_memory_sql(db, ALICE, f"SELECT * FROM {schema}.memories ORDER BY id")
    assert memories.columns == ["id", "content", "importance", "created_at", "updated_at"]
    assert [row[0] for row in memories.rows] == ids["alice_memories"]
    everything = run_memory_sql(
        db,
        ALICE,
        f"SELECT {AGGREGATE[db.dialect]} FROM (SELECT content FROM messages UNION ALL SELECT content FROM memories) s",
    ).render()
    assert "bob" not in everything and "alice" in everything
    assert run_memory_sql(db, ALICE, f"SELECT * FROM memories WHERE id = {ids['bob_memories'][0]}").rows == []
    assert run_memory_sql(db, BOB, "SELECT count(*) FROM memories").rows == [[2]]
    # a leaky predicate (an error that would name a hidden row) runs only on rows the barrier let through
    assert run_memory_sql(
        db, ALICE, "SELECT count(*) FROM memories WHERE 1 / (importance - importance + 1) = 1"
    ).rows == [[3]]


def test_update_of_another_users_memory_changes_nothing(store: Store, store_ids: dict[str, list[int]]) -> None:
    db, ids = store, store_ids
    before = snapshot(db)
    bob_id = ids["bob_memories"][0]
    result = run_memory_sql(db, ALICE, f"UPDATE memories SET content = 'pwned', importance = 9 WHERE id = {bob_id}")
    assert (result.kind, result.updated) == ("update", 0)
    assert result.render() == "Updated 0 memories."
    assert snapshot(db) == before


SELECTS: list[tuple[str, list[list[Any]]]] = [  # the same text and answer on both engines
    (
        "WITH mine AS (SELECT role FROM messages) SELECT role, count(*) FROM mine GROUP BY role ORDER BY role",
        [["assistant", 2], ["user", 2]],
    ),
    ("SELECT count(*), max(importance), sum(importance), avg(importance) FROM memories", [[3, 3, 6, 2.0]]),
    ("SELECT content FROM messages WHERE content LIKE '%delete%'", [["please delete this draft"]]),
    (
        "SELECT 'DROP TABLE users; ATTACH ''x'' AS y; sqlite_master' AS s",
        [["DROP TABLE users; ATTACH 'x' AS y; sqlite_master"]],
    ),
    (
        "SELECT content FROM messages WHERE upper(content) LIKE 'SELECT%' -- a comment with DELETE",
        [["SELECT is my favourite word"]],
    ),
    (
        "SELECT id, row_number() OVER (ORDER BY id DESC) AS rn, lag(id) OVER (ORDER BY id) FROM messages ORDER BY id LIMIT 2",
        [[1, 4, None], [2, 3, 1]],
    ),
    (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT count(*), sum(n) FROM r",
        [[5, 15]],
    ),
    (
        "SELECT upper(substr('abc', 2)), lower('AB'), length('héllo'), abs(-3), round(2.567, 1)",
        [["BC", "ab", 5, 3, 2.6]],
    ),
]
SQLITE_SELECTS: list[tuple[str, list[list[Any]]]] = [  # SQLite's dialect
    (
        "SELECT json_object('n', count(*)), json_extract('{\"a\": [1, 2]}', '$.a[1]'), '{\"x\": 7}' ->> 'x' "
        "FROM memories",
        [['{"n":3}', 2, 7]],
    ),
    ("SELECT sum(value) FROM json_each('[1, 2, 3]')", [[6]]),
    ("SELECT content FROM messages WHERE content LIKE 'select%'", [["SELECT is my favourite word"]]),
    (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r LIMIT 5) SELECT count(*), sum(n) FROM r",
        [[5, 15]],
    ),
    ("SELECT date('2024-01-31', '+1 day'), upper(substr('abc', 2)), typeof(1.5)", [["2024-02-01", "BC", "real"]]),
]
PG_SELECTS: list[tuple[str, list[list[Any]]]] = [  # PostgreSQL's dialect: what the role may call
    (
        "SELECT json_build_object('n', count(*)), ('{\"a\": [1, 2]}'::jsonb -> 'a' ->> 1)::int, "
        "'{\"x\": 7}'::jsonb ->> 'x' FROM memories",
        [['{"n" : 3}', 2, "7"]],
    ),
    ("SELECT sum(value::int) FROM jsonb_array_elements_text('[1, 2, 3]')", [[6]]),
    ("SELECT content FROM messages WHERE content ILIKE 'select%'", [["SELECT is my favourite word"]]),
    (
        "SELECT (date '2024-01-31' + 1)::text, to_char(12.5, 'FM99.0'), 7 / 2, 7.0 / 2",
        [["2024-02-01", "12.5", 3, 3.5]],
    ),
    (
        "SELECT string_agg(content, '|' ORDER BY id) FROM memories",
        [["alice likes tea 0|alice likes tea 1|alice likes tea 2"]],
    ),
    (
        "SELECT array_agg(importance ORDER BY id), regexp_replace('a1b22', '[0-9]+', '#', 'g') FROM memories",
        [["[1, 2, 3]", "a#b#"]],
    ),
    ("SELECT count(*) FROM messages WHERE created_at::text < '9999' AND now() > now() - interval '1 day'", [[4]]),
]


def _assert_select(db: Store, sql: str, rows: list[list[Any]]) -> None:
    before = snapshot(db)
    result = run_memory_sql(db, ALICE, sql)
    assert (result.kind, result.rows, result.truncated) == ("select", rows, False)
    assert snapshot(db) == before


@pytest.mark.parametrize(("sql", "rows"), SELECTS)
def test_selects_work(store: Store, store_ids: dict[str, list[int]], sql: str, rows: list[list[Any]]) -> None:
    _assert_select(store, sql, rows)


@pytest.mark.parametrize("backend", ["sqlite"])
@pytest.mark.parametrize(("sql", "rows"), SQLITE_SELECTS)
def test_sqlite_selects_work(store: Store, store_ids: dict[str, list[int]], sql: str, rows: list[list[Any]]) -> None:
    _assert_select(store, sql, rows)


@pytest.mark.parametrize("backend", ["postgresql"])
@pytest.mark.parametrize(("sql", "rows"), PG_SELECTS)
def test_postgres_selects_work(store: Store, store_ids: dict[str, list[int]], sql: str, rows: list[list[Any]]) -> None:
    _assert_select(store, sql, rows)


def test_rows_are_capped_at_200(store: Store) -> None:
    seed(store, alice_messages=250)
    result = run_memory_sql(store, ALICE, "SELECT id, content FROM messages ORDER BY id")
    assert (result.row_count, len(result.rows), result.truncated) == (200, 200, True)
    assert result.render().splitlines()[-1] == "(200 rows, truncated at 200)"
    assert len(result.render().splitlines()) == 202


def test_render_is_a_compact_table(db: Database, ids: dict[str, list[int]]) -> None:
    result = run_memory_sql(
        db, ALICE, "SELECT 1 AS n, NULL AS missing, 'a\nb' AS text, printf('%.*c', 500, 'x') AS long"
    )
    header, row, footer = result.render().splitlines()
    assert header == "n | missing | text | long"
    assert row.startswith('1 | NULL | "a\\nb" | "xxx') and row.endswith("…") and len(row) < 240
    assert footer == "(1 row)"
    assert result.rows[0][3] == "x" * 500  # stored cells keep up to 2000 characters


FTS_MEMORY_IDS = {  # the engine's own full-text index of memories, read directly
    "sqlite": "SELECT rowid FROM user_memories_fts WHERE user_memories_fts MATCH ?",
    "postgresql": "SELECT id FROM user_memories WHERE search_vector @@ to_tsquery('app_search', ?)",
}


def test_update_content_and_importance_reindexes_search(store: Store, store_ids: dict[str, list[int]]) -> None:
    db, ids = store, store_ids
    target, other = ids["alice_memories"][0], ids["alice_memories"][1]
    before = snapshot(db)
    result = run_memory_sql(
        db, ALICE, f"UPDATE memories SET content = 'prefers zanzibarite now', importance = 9 WHERE id = {target}"
    )
    assert (result.kind, result.updated, result.render()) == ("update", 1, "Updated 1 memory.")
    with db.connection() as conn:
        row = conn.execute(
            "SELECT content, importance, updated_at, user_id FROM user_memories WHERE id = ?", (target,)
        ).fetchone()
        assert tuple(row)[:2] == ("prefers zanzibarite now", 9) and row["user_id"] == ALICE
        old_stamp = next(r[5] for r in before["user_memories"] if r[0] == target)
        assert row["updated_at"] > old_stamp
        hits = conn.execute(FTS_MEMORY_IDS[db.dialect], ("zanzibarite",))
        assert [hit[0] for hit in hits] == [target]
        tea = [hit[0] for hit in conn.execute(FTS_MEMORY_IDS[db.dialect], ("tea",))]
        assert target not in tea and other in tea
    after = snapshot(db)
    assert {k: v for k, v in after.items() if "memories" not in k} == {
        k: v for k, v in before.items() if "memories" not in k
    }


def test_update_may_use_ctes_and_read_the_views(store: Store, store_ids: dict[str, list[int]]) -> None:
    db, ids = store, store_ids
    first = ids["alice_memories"][0]
    sql = (
        f"WITH best(n) AS (SELECT max(importance) + 4 FROM memories) UPDATE memories SET importance = "
        f"(SELECT n FROM best), content = (SELECT content FROM messages ORDER BY id LIMIT 1) WHERE id = {first}"
    )
    assert run_memory_sql(db, ALICE, sql).updated == 1
    assert run_memory_sql(db, ALICE, f"SELECT content, importance FROM memories WHERE id = {first}").rows == [
        ["please delete this draft", 7]
    ]


@pytest.mark.parametrize(("count", "allowed"), [(50, True), (51, False)])
def test_update_row_cap(store: Store, count: int, allowed: bool) -> None:
    db = store
    seed(db, alice_memories=count)
    sql = "UPDATE memories SET importance = 10 WHERE content LIKE 'alice%'"
    if not allowed:
        failure = assert_refused(db, sql, {DENIED})
        assert failure.message == "UPDATE would change 51 > 50 memories; narrow the WHERE. Nothing was changed."
        narrowed = "UPDATE memories SET importance = 10 WHERE id <= (SELECT min(id) + 49 FROM memories)"
        assert run_memory_sql(db, ALICE, narrowed).updated == 50
        return
    assert run_memory_sql(db, ALICE, sql).updated == 50
    assert run_memory_sql(db, ALICE, "SELECT count(*) FROM memories WHERE importance = 10").rows == [[50]]
    assert run_memory_sql(db, BOB, "SELECT max(importance) FROM memories").rows == [[2]]


def test_tool_unit(db: Database, ids: dict[str, list[int]]) -> None:
    schema = MEMORY_SQL_TOOL.function_schema()["function"]["parameters"]
    assert schema["required"] == ["sql"] and schema["properties"]["sql"]["maxLength"] == 10_000
    assert MEMORY_SQL_TOOL.command is not None and MEMORY_SQL_TOOL.command.body_fallback_to_args
    with db.connection() as conn:
        ctx = ToolContext(conn=conn, database=db, settings=None, user_id=ALICE)  # type: ignore[arg-type]
        result = memory_sql_handler(MemorySqlInput(sql="SELECT count(*) AS n FROM memories"), ctx)
    assert isinstance(result, MemorySqlOutput) and result.rows == [[3]]
    with pytest.raises(TypeError):
        run_memory_sql(db, "1", "SELECT 1")  # type: ignore[arg-type]


TOKENS = [
    "SELECT",
    "UPDATE",
    "memories",
    "messages",
    "SET",
    "content",
    "importance",
    "=",
    "'x'",
    "5",
    "WHERE",
    "id",
    "FROM",
    "*",
    ";",
    "DELETE",
    "INSERT",
    "INTO",
    "VALUES",
    "(",
    ")",
    ",",
    "WITH",
    "RECURSIVE",
    "AS",
    "UNION",
    "ALL",
    "users",
    "sqlite_master",
    "user_memories",
    "user_id",
    "pragma_table_info('users')",
    "ATTACH",
    "':memory:'",
    "load_extension('x')",
    "--",
    "/*",
    "*/",
    "LIKE",
    "'%delete%'",
    "count(*)",
    "LIMIT",
    "1",
    "json_each('[1]')",
    "DROP",
    "TABLE",
    "BEGIN",
    "COMMIT",
    "OR",
    "NOT",
    "IN",
    "JOIN",
    "ON",
    "ORDER",
    "BY",
    "RETURNING",
    "\n",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=120), st.lists(st.sampled_from(TOKENS), max_size=14).map(" ".join)))
def test_random_text_only_fails_as_a_tool_failure(store: Store, text: str) -> None:
    db = store
    if not snapshot(db)["users"]:
        seed(db)
    before = snapshot(db)
    try:
        result: MemorySqlOutput | None = run_memory_sql(db, ALICE, text, deadline_s=0.2)
    except ToolFailure:
        result = None
    after = snapshot(db)
    if result is None or result.updated == 0:
        assert after == before
    else:  # a valid UPDATE memories only ever touches Alice's memories and their index
        assert {k: v for k, v in after.items() if "memories" not in k} == {
            k: v for k, v in before.items() if "memories" not in k
        }
        assert [r for r in after["user_memories"] if r[1] == BOB] == [r for r in before["user_memories"] if r[1] == BOB]


def test_the_connection_is_closed_and_temp_objects_are_gone(db: Database, ids: dict[str, list[int]]) -> None:
    run_memory_sql(db, ALICE, "SELECT 1")
    with pytest.raises(ToolFailure):
        run_memory_sql(db, ALICE, "SELECT * FROM sqlite_master")
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM temp.sqlite_schema").fetchone()[0] == 0
        conn.execute("BEGIN IMMEDIATE")  # no lock was left behind
        conn.execute("ROLLBACK")


# bounded by the engine (SPEC 12) ------------------------------------------------------------


def test_a_slow_function_call_is_stopped_at_the_deadline(db: Database, ids: dict[str, list[int]]) -> None:
    """ltrim() runs for a long time inside one VM step, where no progress handler is called; RLIMIT_CPU
    would stop it after 8 s of CPU. Killed at the deadline, its worker burnt far less."""
    with ReapedCpu() as cpu:
        failure = assert_refused(db, SLOW_CALL, {TIMEOUT}, deadline_s=0.5)
    assert "0.5 s" in failure.message and cpu.seconds < 3, cpu.seconds


@pytest.mark.parametrize(
    "sql, words",
    [
        (BLOB_ROWS, "memory"),
        ("SELECT zeroblob(2000000)", "too big"),
        ("SELECT " + ", ".join(f"content AS c{i}" for i in range(65)) + " FROM memories", "too many columns"),
    ],
)
def test_values_and_rows_past_the_engine_limits(db: Database, ids: dict[str, list[int]], sql: str, words: str) -> None:
    failure = assert_refused(db, sql, {INVALID})
    assert words in failure.message


def test_a_wide_result_is_cut_to_the_answer_budget(db: Database, ids: dict[str, list[int]]) -> None:
    result = run_memory_sql(db, ALICE, WIDE_COLUMNS)
    assert result.truncated and result.truncated_by == "bytes" and 0 < result.row_count < 200
    assert len(result.model_dump_json()) < 160_000  # was 24 MB: 200 rows x 60 cells x 2000 characters
    assert result.render().endswith("(1 row, truncated at the size limit: select fewer or shorter columns)")


def test_the_rendered_table_has_a_size_limit() -> None:
    rows = [[number, "y" * 300] for number in range(200)]
    rendered = MemorySqlOutput(kind="select", columns=["n", "text"], rows=rows, row_count=200, truncated=False).render()
    assert len(rendered) < RENDERED_MAX_CHARS + 200
    assert "more rows not shown; select fewer columns or rows)" in rendered and rendered.endswith("(200 rows)")


def test_a_looping_update_holds_no_write_lock(db: Database, ids: dict[str, list[int]]) -> None:
    """The WHERE runs in a worker on a read-only connection; other writers never wait on it: a writer
    that does not wait at all (busy timeout 0) always gets the write lock while the attack runs."""
    failures: list[ToolFailure] = []

    def attack() -> None:
        try:
            run_memory_sql(db, ALICE, LOOPING_UPDATE, deadline_s=1.0)
        except ToolFailure as failure:
            failures.append(failure)

    attacker = threading.Thread(target=attack)
    attacker.start()
    writes = 0
    with db.connection() as conn:
        conn.execute("PRAGMA busy_timeout = 0")  # a held write lock fails BEGIN IMMEDIATE at once
        while attacker.is_alive():
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE users SET name = name WHERE id = ?", (BOB,))
            conn.execute("COMMIT")
            writes += 1
            time.sleep(0.02)
    attacker.join()
    assert [failure.code for failure in failures] == [TIMEOUT]
    assert writes > 10


def test_an_update_is_written_in_one_short_transaction(db: Database) -> None:
    seed(db, alice_memories=50)
    result = run_memory_sql(db, ALICE, "UPDATE memories SET content = content || ' (checked)', importance = 10")
    assert result.updated == 50
    changes = [
        Change(id=row[0], old_content=row[1], old_importance=10, content=row[1] + "!", importance=9)
        for row in run_memory_sql(db, ALICE, "SELECT id, content FROM memories").rows
    ]
    with db.connection() as conn:
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        apply_changes(conn, ALICE, changes)
        conn.set_trace_callback(None)
    # one transaction holding the 50 row writes and nothing else (no query, no worker call inside it).
    # Aside: what SQLite runs for them ("-- …" trigger steps, the full-text index's own statements),
    # and the repeats of a statement's text that SQLite traces at the start of each trigger it fires.
    ours = [
        text
        for text in statements
        if not text.startswith("--") and "_fts_" not in text and text != "PRAGMA 'main'.data_version"
    ]
    ours = [text for index, text in enumerate(ours) if index == 0 or text != ours[index - 1]]
    assert ours[0] == "BEGIN IMMEDIATE" and ours[-1] == "COMMIT" and len(ours) == 52, ours
    assert all(text.lstrip().startswith("UPDATE user_memories") for text in ours[1:-1]), ours
    assert run_memory_sql(
        db, ALICE, "SELECT count(*) FROM memories WHERE content LIKE '%(checked)!' AND importance = 9"
    ).rows == [[50]]


def test_a_memory_changed_meanwhile_is_not_overwritten(store: Store, store_ids: dict[str, list[int]]) -> None:
    db, ids = store, store_ids
    first, second = ids["alice_memories"][:2]
    changes = [
        Change(id=first, old_content="alice likes tea 0", old_importance=1, content="new", importance=1),
        Change(id=second, old_content="not what it holds", old_importance=2, content="new", importance=2),
    ]
    before = snapshot(db)
    with db.connection() as conn, pytest.raises(ToolFailure) as caught:
        apply_changes(conn, ALICE, changes)
    assert caught.value.code == INVALID and f"memory {second} changed" in caught.value.message
    assert snapshot(db) == before


def test_the_handler_uses_the_apps_warm_workers(db: Database, ids: dict[str, list[int]]) -> None:
    with WorkerPool() as box, db.connection() as conn:
        ctx = ToolContext(
            conn=conn,
            database=db,
            settings=None,
            user_id=ALICE,  # type: ignore[arg-type]
            bounded=box,
        )
        for _ in range(3):
            assert memory_sql_handler(MemorySqlInput(sql="SELECT count(*) FROM memories"), ctx).rows == [[3]]
        assert len(box.worker_pids()) == 1
        updated = memory_sql_handler(
            MemorySqlInput(sql=f"UPDATE memories SET importance = 7 WHERE id = {ids['alice_memories'][0]}"), ctx
        )
        assert updated.updated == 1 and not conn.in_transaction


def test_sqlite_errors_from_the_database_file_are_tool_failures(tmp_path: Path) -> None:
    missing = Database(tmp_path / "nowhere" / "app.db")
    with pytest.raises(ToolFailure) as caught:
        run_memory_sql(missing, ALICE, "SELECT 1")
    assert caught.value.code == ErrorCode.INTERNAL_ERROR
    assert not isinstance(caught.value, sqlite3.Error)


OWN_MEMORIES = {  # this user's memories in one cell, in id order
    "sqlite": "SELECT group_concat(content, '|') FROM (SELECT content FROM memories ORDER BY id)",
    "postgresql": "SELECT string_agg(content, '|' ORDER BY id) FROM memories",
}


def test_users_running_at_once_each_see_their_own_rows(store: Store, store_ids: dict[str, list[int]]) -> None:
    """Interleaved calls of two users never see each other's rows (PostgreSQL: each call binds its
    own backend of the role; SQLite: each worker builds the views of its own user)."""
    seen: dict[int, set[str]] = {ALICE: set(), BOB: set()}

    def ask(user: int) -> None:
        for _ in range(8):
            rows = run_memory_sql(store, user, OWN_MEMORIES[store.dialect]).rows
            seen[user].add(rows[0][0])

    threads = [threading.Thread(target=ask, args=(user,)) for user in (ALICE, BOB, ALICE, BOB)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen[ALICE] == {"alice likes tea 0|alice likes tea 1|alice likes tea 2"}
    assert seen[BOB] == {"bob secret memory 0|bob secret memory 1"}


CATALOG = {"sqlite": "SELECT * FROM sqlite_schema", "postgresql": "SELECT * FROM pg_user"}  # the engine's own


def test_the_tool_endpoint_answers_with_the_tool_codes(
    backend: str, backend_settings: dict[str, str], make_app: Callable[..., Flask], fake_llm: FakeLLMServer
) -> None:
    """`POST /tools/memory_sql` of an app on each engine: rows of the caller only, refusals with
    the same tool codes and HTTP statuses."""
    app = make_app(**backend_settings)
    client = app.test_client()
    alice = {"Authorization": f"Bearer {new_token(app, 'alice')}"}
    bob = {"Authorization": f"Bearer {new_token(app, 'bob')}"}
    assert client.post("/tools/remember", json={"fact": "alice likes jazz"}, headers=alice).status_code == 200
    rows = client.post("/tools/memory_sql", json={"sql": "SELECT content FROM memories"}, headers=alice).get_json()
    assert rows["rows"] == [["alice likes jazz"]]
    assert (
        client.post("/tools/memory_sql", json={"sql": "SELECT content FROM memories"}, headers=bob).get_json()["rows"]
        == []
    )
    for sql, status, code in [
        (CATALOG[backend], 403, "PERMISSION_DENIED"),
        ("SELECT * FROM sqlite_master", 403, "PERMISSION_DENIED"),
        ("SELEC 1", 400, "VALIDATION_FAILED"),
        ("UPDATE memories SET importance = 11", 400, "VALIDATION_FAILED"),
    ]:
        response = client.post("/tools/memory_sql", json={"sql": sql}, headers=alice)
        assert (response.status_code, response.get_json()["error"]["code"]) == (status, code), sql
    updated = client.post(
        "/tools/memory_sql", json={"sql": "UPDATE memories SET importance = 7"}, headers=alice
    ).get_json()
    assert updated["updated"] == 1
    found = client.post("/tools/memory_sql", json={"sql": "SELECT importance FROM memories"}, headers=alice).get_json()
    assert found["rows"] == [[7]]


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x0c", "\r"])
def test_an_update_whose_text_holds_a_line_separator_is_stored_as_sent(
    backend: str, backend_settings: dict[str, str], make_app: Callable[..., Flask], separator: str
) -> None:
    """`UPDATE memories SET content = '…U+2028…'` over `POST /tools/memory_sql` on each engine:
    the text is stored exactly (the recorded changes are one JSON object a line, and only `\\n`
    ends a line there), not a 500."""
    app = make_app(**backend_settings)
    client = app.test_client()
    alice = {"Authorization": f"Bearer {new_token(app, 'alice')}"}
    assert client.post("/tools/remember", json={"fact": "alice likes jazz"}, headers=alice).status_code == 200
    text = f"first line{separator}second line"
    sql = f"UPDATE memories SET content = '{text}'"
    updated = client.post("/tools/memory_sql", json={"sql": sql}, headers=alice)
    assert updated.status_code == 200 and updated.get_json()["updated"] == 1, updated.get_json()
    found = client.post("/tools/memory_sql", json={"sql": "SELECT content FROM memories"}, headers=alice).get_json()
    assert found["rows"] == [[text]]
