"""PostgreSQL as the database (DATABASE_URL=postgresql://…): what only PostgreSQL can show.

The behaviour both backends share is tested once, on both (the `store`, `blank_store` and
`backend_settings` fixtures of tests/pg_support.py in test_storage.py, test_migrations.py,
test_memory_tools.py and test_pipeline_purity.py). Here: the `?` translation leaves literals
alone, a broken connection is a storage fault and is replaced, `/health` on a server that is
down, the settings, the CLI, and a real server process whose turns are stored in PostgreSQL
(read back from outside with psql).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from config.settings import ConfigError, load_settings
from storage.db import Database
from storage.errors import StorageUnavailable, storage_fault
from storage.health import probe_database
from storage.messages import add_message, recent_messages
from storage.pg import PgDatabase
from storage.pg_sql import pg_sql
from storage.sessions import create_session
from storage.users import create_user, user_for_token
from tests.pg_support import PgCluster
from tests.process_support import ROOT, clean_env, free_port, run_app, stop_process, wait_until_serving


@pytest.fixture
def pg(pg_url: str) -> Any:
    database = PgDatabase(pg_url, pool_size=4)
    yield database
    database.close()


# --------------------------------------------------------------------------- the adapter


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT ? , ?", "SELECT %s , %s"),
        ("SELECT '?' || ?", "SELECT '?' || %s"),
        ("SELECT 'it''s ?', ?", "SELECT 'it''s ?', %s"),
        ('SELECT "odd?col" FROM t WHERE x = ?', 'SELECT "odd?col" FROM t WHERE x = %s'),
        ("SELECT x % 2, '100%' FROM t", "SELECT x %% 2, '100%%' FROM t"),
        ("SELECT 1 -- is it?\n, ?", "SELECT 1 -- is it?\n, %s"),
        ("SELECT /* ? */ ?", "SELECT /* ? */ %s"),
        ("VALUES (:id, :now, :now)", "VALUES (%(id)s, %(now)s, %(now)s)"),
        ("SELECT a::text, ?", "SELECT a::text, %s"),
        ("BEGIN IMMEDIATE", "BEGIN"),
        ("begin deferred", "BEGIN"),
    ],
)
def test_placeholders_are_translated_outside_literals_only(sql: str, expected: str) -> None:
    assert pg_sql(sql) == expected


def test_a_connection_the_server_dropped_is_a_storage_fault_and_is_replaced(
    pg: PgDatabase, pg_cluster: PgCluster
) -> None:
    conn = pg.thread_connection()
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    with pg_cluster.admin() as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    with pytest.raises(StorageUnavailable) as raised:
        conn.execute("SELECT 1")
    assert storage_fault(raised.value)  # the app answers 503, not 500
    fresh = pg.thread_connection()  # the thread's next statement runs on a new server connection
    assert fresh.execute("SELECT pg_backend_pid()").fetchone()[0] != pid


# --------------------------------------------------------------------------- health, settings, CLI


def test_health_reports_a_database_server_that_is_down() -> None:
    port = free_port()  # nothing listens there
    database = PgDatabase(f"postgresql://nobody:x@127.0.0.1:{port}/none", pool_size=1)
    try:
        health = probe_database(database)
    finally:
        database.close()
    assert health.state == "unavailable" and not health.ok and health.free_bytes is None


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@h/db", "use sqlite:///PATH or postgresql://"),
        ("sqlite://app.db", "sqlite:///PATH"),
        ("postgresql:///db", "needs a host"),
        ("app.db", "use sqlite:///PATH or postgresql://"),
    ],
)
def test_a_bad_database_url_is_a_one_line_config_error(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings({"DATABASE_URL": url}, dotenv_path=None)
    assert "DATABASE_URL" in str(raised.value) and message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_database_url_kinds() -> None:
    assert load_settings({}, dotenv_path=None).database_target().kind == "sqlite"
    sqlite_target = load_settings({"DATABASE_URL": "sqlite:///x/app.db"}, dotenv_path=None).database_target()
    assert (sqlite_target.kind, sqlite_target.location) == ("sqlite", "x/app.db")
    pg_target = load_settings({"DATABASE_URL": "postgresql://u:secret@db:5432/app"}, dotenv_path=None).database_target()
    assert pg_target.kind == "postgresql" and "secret" not in pg_target.redacted()


def test_cli_user_and_token_commands_on_postgresql(tmp_path: Path, base_settings: dict[str, Any], pg_url: str) -> None:
    env = clean_env(tmp_path, base_settings, DATABASE_URL=pg_url)
    created = run_app(env, "create-user", "alice")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip().splitlines()[-1]
    again = run_app(env, "create-user", "alice")
    assert again.returncode != 0 and "already exists" in again.stderr and "Traceback" not in again.stderr
    listing = run_app(env, "tokens", "list", "--user", "alice")
    assert listing.returncode == 0 and "alice" in listing.stdout
    rotated = run_app(env, "tokens", "rotate", "alice")
    assert rotated.returncode == 0, rotated.stderr
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE u.name = 'alice'"
        ).fetchone() == (1,)
    database = PgDatabase(pg_url, pool_size=1)
    try:
        assert user_for_token(database.thread_connection(), token) is None  # rotated away
    finally:
        database.close()
    assert not (tmp_path / "app.db").exists()  # nothing went to the SQLite default


def test_backup_points_to_pg_dump_on_postgresql(tmp_path: Path, base_settings: dict[str, Any], pg_url: str) -> None:
    result = run_app(clean_env(tmp_path, base_settings, DATABASE_URL=pg_url), "backup", str(tmp_path / "b.db"))
    assert result.returncode != 0 and "pg_dump" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "b.db").exists()


def test_backup_copies_a_sqlite_database(tmp_path: Path, base_settings: dict[str, Any]) -> None:
    env = clean_env(tmp_path, base_settings)
    assert run_app(env, "create-user", "alice").returncode == 0
    result = run_app(env, "backup", str(tmp_path / "copy.db"))
    assert result.returncode == 0, result.stderr
    with Database(tmp_path / "copy.db").connection() as conn:
        assert [row[0] for row in conn.execute("SELECT name FROM users ORDER BY id")][-1] == "alice"


# --------------------------------------------------------------------------- the real server


@pytest.mark.slow
def test_a_real_server_process_stores_and_replays_turns_in_postgresql(
    tmp_path: Path, base_settings: dict[str, Any], pg_url: str, pg_cluster: PgCluster
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["/remember likes green tea", "Noted: green tea.", "You like green tea."]))
    port = free_port()
    env = clean_env(
        tmp_path,
        base_settings,
        HOST="127.0.0.1",
        PORT=str(port),
        LLM_PROVIDER="scripted",
        SCRIPTED_REPLIES=str(script),
        DATABASE_URL=pg_url,
        DATABASE_POOL_SIZE="4",
    )
    base = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "server.log"
    log = log_path.open("w")
    server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_serving(server, f"{base}/health", log_path)
        health = requests.get(f"{base}/health", timeout=10)
        assert health.status_code == 200 and health.json()["database"]["ok"], health.text
        token = Path(base_settings["auth_token_file"]).read_text(encoding="utf-8").strip()
        auth = {"Authorization": f"Bearer {token}"}
        first = requests.post(f"{base}/chat", json={"message": "I like green tea"}, headers=auth, timeout=30)
        assert first.status_code == 200, first.text
        body = first.json()
        assert [m["role"] for m in body["messages"]] == ["user", "memory_tools", "assistant"]
        session_id = body["session_id"]
        second = requests.post(
            f"{base}/chat", json={"message": "what do I like?", "session_id": session_id}, headers=auth, timeout=30
        )
        assert second.status_code == 200 and second.json()["reply"] == "You like green tea.", second.text
        replay = requests.get(f"{base}/sessions/{session_id}/messages?limit=50", headers=auth, timeout=10).json()
        assert [m["role"] for m in replay["messages"]] == ["user", "memory_tools", "assistant", "user", "assistant"]
        sessions = requests.get(f"{base}/sessions", headers=auth, timeout=10).json()
        assert session_id in json.dumps(sessions)
    finally:
        stop_process(server, log)
    # read from outside the app, with the server stopped: every row is in PostgreSQL
    database = pg_url.rsplit("/", 1)[1]
    stored = pg_cluster.psql(database, f"SELECT role FROM chat_messages WHERE session_id = '{session_id}' ORDER BY id")
    assert stored.split() == ["user", "memory_tools", "assistant", "user", "assistant"]
    assert pg_cluster.psql(database, "SELECT content FROM user_memories").strip() == "likes green tea"
    assert not Path(base_settings["database_path"]).exists()  # nothing went to the SQLite default


def test_a_pool_of_one_serves_every_request_and_turn_thread(pg_url: str, make_app: Any, fake_llm: Any) -> None:
    """Each request and each turn (on a worker thread of its own) hands its connection back
    when it ends: with DATABASE_POOL_SIZE=1, turn after turn still gets one at once."""
    app = make_app(llm_base_url=fake_llm.openai_base_url, database_url=pg_url, database_pool_size=1)
    from tests.conftest import new_token

    auth = {"Authorization": f"Bearer {new_token(app)}"}
    client = app.test_client()
    session_id = None
    started = time.monotonic()
    for number in range(6):
        fake_llm.queue(f"answer {number}")
        body = client.post(
            "/chat", json={"message": f"q{number}", **({"session_id": session_id} if session_id else {})}, headers=auth
        )
        assert body.status_code == 200, body.get_json()
        session_id = body.get_json()["session_id"]
    assert time.monotonic() - started < 10  # no thread waited out the pool's timeout
    listed = client.get(f"/sessions/{session_id}/messages", headers=auth).get_json()["messages"]
    assert len(listed) == 12


def test_turns_waiting_on_their_model_hold_no_server_connection(pg_url: str, make_app: Any, fake_llm: Any) -> None:
    """A turn lends its connection back before it waits on the model: with DATABASE_POOL_SIZE=1,
    four turns wait on the model at once and other requests are served meanwhile (were the
    connection held through the call, the second turn could not even store its message)."""
    from concurrent.futures import ThreadPoolExecutor

    from testing.waiting import wait_until
    from tests.conftest import new_token

    app = make_app(llm_base_url=fake_llm.openai_base_url, database_url=pg_url, database_pool_size=1)
    auth = {"Authorization": f"Bearer {new_token(app)}"}
    client = app.test_client()
    sessions = [client.post("/sessions", json={}, headers=auth).get_json()["id"] for _ in range(4)]
    fake_llm.released.clear()
    try:
        with ThreadPoolExecutor(4) as pool:
            turns = [
                pool.submit(
                    lambda sid: app.test_client().post(
                        "/chat", json={"message": "hi", "session_id": sid}, headers=auth
                    ),
                    sid,
                )
                for sid in sessions
            ]
            wait_until(lambda: fake_llm.in_flight == 4, "four turns waiting on the model at once")
            listed = client.get("/sessions", headers=auth)
            assert listed.status_code == 200 and len(listed.get_json()["sessions"]) >= 4
            fake_llm.released.set()
            assert [turn.result().status_code for turn in turns] == [200] * 4
    finally:
        fake_llm.released.set()


def test_a_sqlite_database_url_names_the_file_used(tmp_path: Path, base_settings: dict[str, Any]) -> None:
    """`DATABASE_URL=sqlite:///PATH` wins over DATABASE_PATH (and the file is made owner-only)."""
    other = tmp_path / "elsewhere" / "chosen.db"
    result = run_app(clean_env(tmp_path, base_settings, DATABASE_URL=f"sqlite:///{other}"), "create-user", "alice")
    assert result.returncode == 0, result.stderr
    assert other.exists() and not Path(base_settings["database_path"]).exists()
    assert other.stat().st_mode & 0o077 == 0  # readable by the server's user only
    with Database(other).connection() as conn:
        assert conn.execute("SELECT name FROM users").fetchall()[0][0] == "alice"


def test_a_nul_in_a_message_is_stored_as_a_replacement_not_refused(pg: PgDatabase) -> None:
    conn = pg.thread_connection()
    alice = create_user(conn, "alice")[0].id
    session = create_session(conn, alice)
    stored = add_message(conn, session_id=session.id, user_id=alice, role="user", content="a\x00b", meta={"k": "c\x00"})
    again = recent_messages(conn, session.id, 1)[0]
    assert (again.id, again.content) == (stored.id, "a\ufffdb")


def test_a_database_that_went_away_answers_503_not_500(
    pg_cluster: PgCluster, pg_url: str, make_app: Any, fake_llm: Any
) -> None:
    app = make_app(llm_base_url=fake_llm.openai_base_url, database_url=pg_url, database_pool_size=2)
    from tests.conftest import new_token

    auth = {"Authorization": f"Bearer {new_token(app)}"}
    client = app.test_client()
    assert client.get("/sessions", headers=auth).status_code == 200
    pg_cluster.drop_database(pg_url.rsplit("/", 1)[1])  # every connection cut, and none possible
    gone = client.get("/sessions", headers=auth)
    assert gone.status_code == 503 and gone.get_json()["error"]["code"] == "storage_unavailable"
    health = client.get("/health")
    assert health.status_code == 503 and health.get_json()["database"]["state"] == "unavailable"


def test_the_start_up_report_names_the_database_without_its_password(tmp_path: Path) -> None:
    from config.settings import Settings
    from serving.startup import database_line

    pg_line = database_line(Settings(database_url="postgresql://app:s3cret@db.example:5432/chat", database_pool_size=7))
    assert pg_line.text == "database: PostgreSQL postgresql://app:***@db.example:5432/chat (at most 7 connections)"
    sqlite_line = database_line(Settings(database_path=str(tmp_path / "app.db")))
    assert sqlite_line.text == f"database: SQLite file {(tmp_path / 'app.db').resolve()}"
