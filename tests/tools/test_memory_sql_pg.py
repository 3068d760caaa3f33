"""`/memory_sql` on PostgreSQL: what only PostgreSQL shows (the shared rules, the deadline, the
caps, cancelling, other users' rows, the HTTP endpoint, are proved on both engines in
test_memory_sql.py).

Every bypass a PostgreSQL user would try is refused by PostgreSQL itself, with nothing changed:
catalogs, the app's tables, files and programs, dblink, settings and roles, functions with side
effects, other users' rows. Runaway statements stop at the deadline (or at `temp_file_limit`),
results are capped while they are fetched, and the restricted role is what the confinement says
it is (its own login, no memberships, nothing bound = nothing visible). Real PostgreSQL only
(`pg_url`, tests/pg_support.py).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from foundation.fair_share import FairGate
from storage.pg import PgDatabase
from storage.pg_confinement import allowed_signatures, confine, read_login
from storage.pg_memory_sql import main as confine_main
from tests.pg_support import PgCluster
from tests.tools.test_memory_sql import ALICE, BOB, DENIED, INVALID, TIMEOUT, assert_refused, seed, snapshot
from tools.base import ErrorCode, ToolFailure
from tools.memory_sql import run_memory_sql

UNAVAILABLE = ErrorCode.INTERNAL_ERROR  # SqlError UNAVAILABLE, as the tool reports it


@pytest.fixture
def pg(pg_url: str) -> Iterator[PgDatabase]:
    database = PgDatabase(pg_url, pool_size=4)
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def pg_ids(pg: PgDatabase) -> dict[str, list[int]]:
    return seed(pg)


BYPASSES: list[tuple[str, ErrorCode, str]] = [
    # catalogs and the information schema
    ("SELECT rolname, rolpassword FROM pg_authid", DENIED, "permission denied for table pg_authid"),
    ("SELECT passwd FROM pg_shadow", DENIED, "permission denied for view pg_shadow"),
    ("SELECT usename FROM pg_user", DENIED, "permission denied for view pg_user"),
    ("SELECT rolname FROM pg_catalog.pg_roles", DENIED, "permission denied for view pg_roles"),
    ("SELECT relname FROM pg_class", DENIED, "permission denied for table pg_class"),
    ("SELECT query FROM pg_stat_activity", DENIED, "permission denied for view pg_stat_activity"),
    ("SELECT name, setting FROM pg_settings", DENIED, "permission denied for view pg_settings"),
    ("UPDATE pg_settings SET setting = 'public' WHERE name = 'search_path'", DENIED, "permission denied"),
    ("SELECT table_name FROM information_schema.tables", DENIED, "permission denied for schema information_schema"),
    ("SELECT * FROM information_schema.columns WHERE table_name = 'api_tokens'", DENIED, "information_schema"),
    # the app's tables, directly or through the confinement's own tables
    ("SELECT token_hash FROM api_tokens", DENIED, 'relation "api_tokens" does not exist or is not available'),
    ("SELECT token_hash FROM public.api_tokens", DENIED, "permission denied for schema public"),
    ("SELECT name FROM public.users", DENIED, "permission denied for schema public"),
    ("SELECT content FROM public.chat_messages WHERE user_id = 2", DENIED, "permission denied for schema public"),
    ("SELECT * FROM memory_sql.bindings", DENIED, "permission denied for table bindings"),
    ("SELECT password FROM memory_sql.login", DENIED, "permission denied for table login"),
    ("UPDATE memories SET content = u.name FROM public.users u", DENIED, "permission denied for schema public"),
    # files, programs, other servers
    ("SELECT pg_read_file('/etc/passwd')", DENIED, "permission denied for function pg_read_file"),
    ("SELECT pg_read_binary_file('/etc/passwd')", DENIED, "permission denied for function pg_read_binary_file"),
    ("SELECT * FROM pg_ls_dir('.')", DENIED, "permission denied for function pg_ls_dir"),
    ("SELECT pg_stat_file('postgresql.conf')", DENIED, "permission denied for function pg_stat_file"),
    ("COPY (SELECT 1) TO PROGRAM 'touch {tmp}/pwned'", DENIED, "only SELECT or UPDATE memories"),
    ("COPY memories FROM PROGRAM 'id'", DENIED, "only SELECT or UPDATE memories"),
    ("COPY (SELECT content FROM memories) TO '{tmp}/pwned'", DENIED, "only SELECT or UPDATE memories"),
    ("SELECT lo_import('/etc/passwd')", DENIED, "permission denied for function lo_import"),
    ("SELECT lo_export(1, '{tmp}/pwned')", DENIED, "permission denied for function lo_export"),
    ("SELECT lo_create(0)", DENIED, "permission denied for function lo_create"),
    ("SELECT lo_from_bytea(0, 'x')", DENIED, "permission denied for function lo_from_bytea"),
    ("SELECT * FROM dblink('dbname=postgres', 'SELECT 1') AS t(x int)", DENIED, "dblink"),
    ("SELECT public.dblink_connect('dbname=postgres')", DENIED, "permission denied for schema public"),
    # settings, roles, sessions
    ("SELECT set_config('search_path', 'public', false)", DENIED, "permission denied for function set_config"),
    ("SELECT current_setting('is_superuser')", DENIED, "permission denied for function current_setting"),
    ("SET search_path = public", DENIED, "only SELECT or UPDATE memories"),
    ("SET statement_timeout = 0", DENIED, "only SELECT or UPDATE memories"),
    ("SET ROLE postgres", DENIED, "only SELECT or UPDATE memories"),
    ("SET SESSION AUTHORIZATION postgres", DENIED, "only SELECT or UPDATE memories"),
    ("RESET ROLE", DENIED, "only SELECT or UPDATE memories"),
    ("RESET ALL", DENIED, "only SELECT or UPDATE memories"),
    ("DISCARD ALL", DENIED, "only SELECT or UPDATE memories"),
    ("ALTER ROLE CURRENT_USER SET statement_timeout = 0", DENIED, "only SELECT or UPDATE memories"),
    ("ALTER SYSTEM SET statement_timeout = 0", DENIED, "only SELECT or UPDATE memories"),
    ("DO $$ BEGIN PERFORM set_config('search_path', 'public', false); END $$", DENIED, "only SELECT or UPDATE"),
    ("LOAD 'plpgsql'", DENIED, "only SELECT or UPDATE memories"),
    ("BEGIN", DENIED, "only SELECT or UPDATE memories"),
    ("COMMIT", DENIED, "only SELECT or UPDATE memories"),
    ("PREPARE p AS SELECT 1", DENIED, "only SELECT or UPDATE memories"),
    ("DECLARE c CURSOR FOR SELECT 1", DENIED, "only SELECT or UPDATE memories"),
    ("LISTEN c", DENIED, "only SELECT or UPDATE memories"),
    ("NOTIFY c", DENIED, "only SELECT or UPDATE memories"),
    ("SELECT pg_notify('c', 'x')", DENIED, "permission denied for function pg_notify"),
    # functions with side effects, or a view of the server
    ("SELECT nextval('public.user_memories_id_seq')", DENIED, "permission denied"),
    ("SELECT setval('public.users_id_seq', 1)", DENIED, "permission denied"),
    ("SELECT pg_terminate_backend(1)", DENIED, "permission denied for function pg_terminate_backend"),
    ("SELECT pg_cancel_backend(1)", DENIED, "permission denied for function pg_cancel_backend"),
    ("SELECT pg_advisory_lock(1)", DENIED, "permission denied for function pg_advisory_lock"),
    ("SELECT pg_try_advisory_xact_lock(1)", DENIED, "permission denied for function pg_try_advisory_xact_lock"),
    ("SELECT pg_sleep(10)", DENIED, "permission denied for function pg_sleep"),
    ("SELECT pg_reload_conf()", DENIED, "permission denied for function pg_reload_conf"),
    ("SELECT txid_current()", DENIED, "permission denied for function txid_current"),
    ("SELECT version()", DENIED, "permission denied for function version"),
    ("SELECT pg_backend_pid()", DENIED, "permission denied for function pg_backend_pid"),
    ("SELECT query_to_xml('SELECT * FROM public.api_tokens', true, true, '')", DENIED, "query_to_xml"),
    ("SELECT * FROM ts_stat('SELECT search_vector FROM public.user_memories')", DENIED, "ts_stat"),
    ("SELECT table_to_xml('public.users', true, true, '')", DENIED, "permission denied"),
    ("SELECT current_database()", DENIED, "permission denied for function current_database"),
    ("SELECT count(*) FROM memories WHERE pg_advisory_lock(id) IS NULL", DENIED, "pg_advisory_lock"),
    # DDL, other writes, data-modifying CTEs
    ("CREATE TEMP TABLE t (x int)", DENIED, "only SELECT or UPDATE memories"),
    ("CREATE TABLE memory_sql.t AS SELECT * FROM memories", DENIED, "only SELECT or UPDATE memories"),
    ("SELECT * INTO memory_sql.t FROM memories", DENIED, "only SELECT or UPDATE memories"),
    ("CREATE FUNCTION f() RETURNS int LANGUAGE sql AS 'SELECT 1'", DENIED, "only SELECT or UPDATE memories"),
    ("CREATE EXTENSION dblink", DENIED, "only SELECT or UPDATE memories"),
    ("GRANT SELECT ON memories TO PUBLIC", DENIED, "only SELECT or UPDATE memories"),
    ("DROP VIEW memories", DENIED, "only SELECT or UPDATE memories"),
    ("TRUNCATE memories", DENIED, "only SELECT or UPDATE memories"),
    ("VACUUM", DENIED, "only SELECT or UPDATE memories"),
    ("DELETE FROM memories", DENIED, "permission denied for view memories"),
    ("INSERT INTO memories (content) VALUES ('x')", DENIED, "permission denied for view memories"),
    ("UPDATE memories SET created_at = 'x'", DENIED, "permission denied for view memories"),
    ("UPDATE messages SET content = 'x'", DENIED, "permission denied for view messages"),
    ("WITH x AS (DELETE FROM memories RETURNING *) SELECT * FROM x", DENIED, "permission denied for view memories"),
    ("WITH x AS (UPDATE memories SET importance = 5 RETURNING id) SELECT * FROM x", INVALID, "top level"),
    ("SELECT * FROM memories FOR UPDATE", DENIED, "read-only transaction"),
    # another user's rows
    ("SELECT content FROM messages WHERE user_id = 2", INVALID, 'column "user_id" does not exist'),
]


@pytest.mark.parametrize(("sql", "code", "words"), BYPASSES)
def test_bypass_is_refused_by_postgresql(
    pg: PgDatabase, pg_ids: dict[str, list[int]], tmp_path: Path, sql: str, code: ErrorCode, words: str
) -> None:
    if "dblink" in sql:  # the extension is installed in this database, as an administrator might have
        with pg.connection() as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS dblink SCHEMA public")
    failure = assert_refused(pg, sql.replace("{tmp}", str(tmp_path)), {code})
    assert words in failure.message, failure.message
    assert not (tmp_path / "pwned").exists()


def test_the_role_is_its_own_login_and_sees_nothing_unbound(pg: PgDatabase, pg_ids: dict[str, list[int]]) -> None:
    with pg.connection() as conn:
        login = read_login(conn)
        assert login is not None
        attributes = conn.execute(
            "SELECT rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolbypassrls, rolcanlogin FROM pg_roles "
            "WHERE rolname = ?",
            (login.role,),
        ).fetchone()
        memberships = conn.execute(
            "SELECT count(*) FROM pg_auth_members WHERE member = (SELECT oid FROM pg_roles WHERE rolname = ?)",
            (login.role,),
        ).fetchone()
    assert tuple(attributes) == (False, False, False, False, False, True) and memberships[0] == 0
    url = psycopg.conninfo.make_conninfo(pg.url, user=login.role, password=login.password)
    with psycopg.connect(url, autocommit=True) as direct:  # logged in as the role, with no binding
        assert direct.execute("SELECT count(*) FROM messages").fetchone() == (0,)
        assert direct.execute("SELECT count(*) FROM memories").fetchone() == (0,)
        for escape in ("SET ROLE postgres", "SET SESSION AUTHORIZATION postgres"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                direct.execute(escape)
        direct.execute("RESET ROLE")  # back to itself: nothing gained
        assert direct.execute("SELECT current_user").fetchone() == (login.role,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            direct.execute("SET temp_file_limit = -1")
    with pytest.raises(psycopg.OperationalError):  # the role logs in with its password only
        psycopg.connect(psycopg.conninfo.make_conninfo(pg.url, user=login.role, password="guess"))


def test_the_app_role_keeps_its_rights(pg: PgDatabase, pg_ids: dict[str, list[int]]) -> None:
    """Revoked from PUBLIC, granted back to the app: its own queries of catalogs and functions work."""
    with pg.connection() as conn:
        assert conn.execute("SELECT set_config('application_name', 'app', false)").fetchone()[0] == "app"
        assert conn.execute("SELECT count(*) > 0 FROM pg_class").fetchone()[0] is True
        assert conn.execute("SELECT count(*) FROM information_schema.tables").fetchone()[0] > 0


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM generate_series(1, 10000000) a ORDER BY random()",
        "SELECT count(*) FROM (SELECT a.n, b.n FROM generate_series(1, 3000) a(n), generate_series(1, 3000) b(n) "
        "ORDER BY 1 DESC, 2) s",
        "WITH RECURSIVE r(n, b) AS (SELECT 1, ''::text UNION SELECT n + 1, md5(random()::text) FROM r) "
        "SELECT count(*) FROM r",
    ],
)
def test_a_cross_join_bomb_meets_temp_file_limit(pg: PgDatabase, pg_ids: dict[str, list[int]], sql: str) -> None:
    failure = assert_refused(pg, sql, {INVALID, TIMEOUT})
    assert "temp_file_limit" in failure.message or "ran longer" in failure.message, failure.message


def test_a_huge_result_is_capped_while_fetched(pg: PgDatabase, pg_ids: dict[str, list[int]]) -> None:
    started = time.monotonic()
    result = run_memory_sql(pg, ALICE, "SELECT generate_series(1, 100000000) AS n")
    assert (result.row_count, result.truncated_by) == (200, "rows") and time.monotonic() - started < 1
    wide = run_memory_sql(
        pg,
        ALICE,
        "SELECT g, " + ", ".join(f"repeat('x', 3000) AS c{i}" for i in range(60)) + " FROM generate_series(1, 200) g",
    )
    assert wide.truncated_by == "bytes" and 0 < wide.row_count < 200 and len(wide.model_dump_json()) < 160_000
    failure = assert_refused(pg, "SELECT repeat('x', 5000000)", {INVALID})
    assert "rows are at most" in failure.message


def test_an_unconfined_database_answers_unavailable_until_confined(pg_cluster: PgCluster, pg_empty_url: str) -> None:
    """Migrated by an ordinary owner role, the step is skipped (catalog rights need a superuser);
    the operator's `python -m storage.pg_memory_sql <superuser URL>` confines it later."""
    owner = f"owner_{int(time.monotonic() * 1000) % 10**9}"
    database = pg_empty_url.rsplit("/", 1)[1]
    with psycopg.connect(pg_empty_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {owner} LOGIN PASSWORD 'pw'")
        admin.execute(f'ALTER DATABASE "{database}" OWNER TO {owner}')
        admin.execute(f"ALTER SCHEMA public OWNER TO {owner}")
    app = PgDatabase(pg_cluster.url(database, user=owner, password="pw"), pool_size=2)
    try:
        app.migrate()
        seed(app)
        with pytest.raises(ToolFailure) as caught:
            run_memory_sql(app, ALICE, "SELECT count(*) FROM memories")
        assert caught.value.code == UNAVAILABLE and "not set up" in caught.value.message
        assert confine_main(["pg_memory_sql", pg_empty_url]) == 0
        assert run_memory_sql(app, ALICE, "SELECT count(*) FROM memories").rows == [[3]]
        assert run_memory_sql(app, BOB, "SELECT count(*) FROM memories").rows == [[2]]
        with app.connection() as conn:  # the owner still reads the catalogs it needs
            assert conn.execute("SELECT count(*) > 0 FROM pg_class").fetchone()[0] is True
    finally:
        app.close()


def test_a_role_that_cannot_log_in_answers_unavailable(pg: PgDatabase, pg_ids: dict[str, list[int]]) -> None:
    with pg.connection() as conn:
        login = read_login(conn)
        assert login is not None
        conn.execute(f"ALTER ROLE {login.role} NOLOGIN")
    try:
        with pytest.raises(ToolFailure) as caught:
            run_memory_sql(pg, ALICE, "SELECT count(*) FROM memories")
        assert caught.value.code == UNAVAILABLE and "cannot run the query now" in caught.value.message
    finally:
        with pg.connection() as conn:
            conn.execute(f"ALTER ROLE {login.role} LOGIN")
    assert run_memory_sql(pg, ALICE, "SELECT count(*) FROM memories").rows == [[3]]


def test_confining_again_changes_nothing(pg: PgDatabase, pg_ids: dict[str, list[int]]) -> None:
    """The step is idempotent: the same login, the same rights, nothing left for PUBLIC to lose."""
    before = snapshot(pg)
    with pg.connection() as conn:
        first = read_login(conn)
        conn.execute("BEGIN")
        again = confine(conn)
        conn.execute("COMMIT")
        executable = conn.execute(
            """SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'pg_catalog'::regnamespace
            AND p.prokind IN ('f', 'a', 'w') AND has_function_privilege(?, p.oid, 'EXECUTE') ORDER BY 1""",
            (again.role,),
        ).fetchall()
        allowed = allowed_signatures(conn)
    assert again == first and [row[0] for row in executable] == allowed
    # a database copied from a template does not copy its own ACL (pg_database is shared): confining
    # the copy again revokes TEMP there too; nothing else differs
    after = snapshot(pg)
    same = set(after) - {"databases"}
    assert {k: after[k] for k in same} == {k: before[k] for k in same}
    assert_refused(pg, "SELECT set_config('search_path', 'public', false)", {DENIED})
    assert run_memory_sql(pg, ALICE, "SELECT count(*) FROM memories").rows == [[3]]


def test_an_update_locks_no_row_while_its_where_runs(pg: PgDatabase, pg_ids: dict[str, list[int]]) -> None:
    """The first memory matches at once, the next one's WHERE runs past the deadline. Meanwhile a
    writer that waits for no lock (lock_timeout 10 ms) keeps updating that first memory: the
    statement's trigger only recorded it. At the deadline nothing was written."""
    first = pg_ids["alice_memories"][0]
    sql = (
        f"UPDATE memories SET importance = 9 WHERE CASE WHEN id = {first} THEN true ELSE "
        "(SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b) > 0 END"
    )
    failures: list[ToolFailure] = []

    def attack() -> None:
        try:
            run_memory_sql(pg, ALICE, sql, deadline_s=1.0)
        except ToolFailure as failure:
            failures.append(failure)

    attacker = threading.Thread(target=attack)
    attacker.start()
    writes = 0
    with pg.connection() as conn:
        conn.execute("SET lock_timeout = '10ms'")
        while attacker.is_alive():
            conn.execute("BEGIN")
            conn.execute("UPDATE user_memories SET importance = importance WHERE id = ?", (first,))
            conn.execute("COMMIT")
            writes += 1
            time.sleep(0.02)
        conn.execute("RESET lock_timeout")
    attacker.join()
    assert [failure.code for failure in failures] == [TIMEOUT] and writes > 10
    assert run_memory_sql(pg, ALICE, f"SELECT importance FROM memories WHERE id = {first}").rows == [[1]]


# The query: XPath over XMLPARSE grows cubically and libxml2 never looks at PostgreSQL's
# cancel flag (four levels ran for minutes whatever statement_timeout said; three run ~0.2 s).
CUBIC_XPATH = (
    "SELECT count(*) FROM unnest(xpath('{path}', XMLPARSE(DOCUMENT repeat('<a>', 250) || repeat('</a>', 250))))"
)
XML_REFUSALS: list[tuple[str, str]] = [
    (CUBIC_XPATH.format(path="//a//a//a//a"), "permission denied for function xpath"),
    (CUBIC_XPATH.format(path="//a//a//a"), "permission denied for function xpath"),
    ("SELECT xpath_exists('//a', '<a/>'::xml)", "xpath_exists"),
    ("SELECT count(*) FROM memories WHERE xmlexists('//a' PASSING BY VALUE CAST(content AS xml))", "permission denied"),
    (
        "SELECT count(*) FROM XMLTABLE('//a//a//a//a' PASSING XMLPARSE(DOCUMENT repeat('<a>', 250) || repeat('</a>', 250))"
        " COLUMNS x text PATH '.')",
        "XMLTABLE is not available",
    ),
    ("SELECT XMLSERIALIZE(DOCUMENT XMLPARSE(DOCUMENT content) AS text) FROM memories", "XMLSERIALIZE is not available"),
    ("SELECT XMLPARSE(CONTENT content) FROM memories", "XMLPARSE is not available"),
    ("SELECT XMLELEMENT(NAME a, content) FROM memories", "XMLELEMENT is not available"),
    ("SELECT count(*) FROM memories WHERE XMLPARSE(CONTENT content) IS DOCUMENT", "not available"),
    ("SELECT '<a/>'::xml", "::xml is not available"),
    ("SELECT xmlagg(XMLELEMENT(NAME a, content)) FROM memories", "xmlagg"),
    ("SELECT query_to_xml('SELECT 1', true, true, '')", "permission denied for function query_to_xml"),
    ("SELECT xml_is_well_formed(content) FROM memories", "permission denied for function xml_is_well_formed"),
    ("SELECT jsonb_path_query('[1, 2]', '$[*]')", "permission denied for function jsonb_path_query"),
    ("SELECT '{\"a\": 1}'::jsonb @? '$.a'", "permission denied for function jsonb_path_exists_opr"),
    ("SELECT to_tsvector(content) FROM memories", "permission denied for function to_tsvector"),
]


@pytest.mark.parametrize(("sql", "words"), XML_REFUSALS)
def test_code_that_ignores_cancel_is_refused_by_name(
    pg: PgDatabase, pg_ids: dict[str, list[int]], sql: str, words: str
) -> None:
    failure = assert_refused(pg, sql, {DENIED})
    assert words in failure.message, failure.message


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM memories WHERE content LIKE '%XMLPARSE(%' OR content = 'IS DOCUMENT'",
        "SELECT content AS \"XMLPARSE(\" FROM memories WHERE content ~ 'x(m|l)+' ORDER BY id",
        "SELECT lower(content), length(content) || ' chars', now() - interval '1 day' < now(), "
        "created_at::date, array_to_string(array[id, importance], ','), to_char(now(), 'YYYY') FROM memories",
        "SELECT string_agg(content, ', ' ORDER BY id), json_agg(id), avg(importance), "
        "count(*) FILTER (WHERE content ILIKE '%a%') FROM memories",
        "SELECT id, rank() OVER (ORDER BY importance DESC), coalesce(NULL, content) FROM memories "
        "WHERE id IN (SELECT id FROM memories) AND importance BETWEEN 1 AND 10",
        "SELECT jsonb_build_object('c', content) ->> 'c', (array[1, 2, 3])[2], split_part(content, ' ', 1) FROM memories",
    ],
)
def test_ordinary_queries_still_run(pg: PgDatabase, pg_ids: dict[str, list[int]], sql: str) -> None:
    """The allow-list keeps what a model asks for: operators, casts, text, dates, aggregates,
    windows, JSON; text that merely mentions XML is no XML."""
    assert run_memory_sql(pg, ALICE, sql).kind == "select"


def _role_backends(pg: PgDatabase) -> list[tuple[int, str]]:
    """(pid, state) of the restricted role's backends in this test's database."""
    with pg.connection() as conn:
        login = read_login(conn)
        assert login is not None
        rows = conn.execute(
            "SELECT pid, state FROM pg_stat_activity WHERE usename = ? AND datname = current_database()",
            (login.role,),
        ).fetchall()
    return [(int(row[0]), str(row[1])) for row in rows]


def test_a_backend_that_ignores_the_cancel_costs_the_caller_no_more_than_the_deadline(
    pg: PgDatabase, pg_ids: dict[str, list[int]]
) -> None:
    """A backend that answers nothing (stopped with SIGSTOP: it cannot see a cancel, as a
    backend inside libxml2 cannot): the caller still gets TIMEOUT soon after its 1 s deadline
    (the supervisor cut its connection off), and the backend is terminated from the app's
    connection, so once it runs again it is gone."""
    results: list[ToolFailure | object] = []

    def call() -> None:
        try:
            results.append(run_memory_sql(pg, ALICE, SLOW_QUERY, deadline_s=1.0))
        except ToolFailure as failure:
            results.append(failure)

    caller = threading.Thread(target=call)
    caller.start()
    pid = _wait_for_active_backend(pg)
    os.kill(pid, signal.SIGSTOP)
    try:
        caller.join(HANG_S)
        assert not caller.is_alive(), "the caller waited on a backend that did not answer"
    finally:
        os.kill(pid, signal.SIGCONT)
    [failure] = results
    assert isinstance(failure, ToolFailure) and failure.code == TIMEOUT, failure
    _wait_until(lambda: pid not in dict(_role_backends(pg)))
    assert run_memory_sql(pg, ALICE, "SELECT count(*) FROM memories").rows == [[3]]


SLOW_QUERY = "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b"
HANG_S = 5  # a hang detector only: the caller is due back 1 s + TERMINATE_AFTER_S after it started


def _wait_for_active_backend(pg: PgDatabase) -> int:
    found: list[int] = []

    def active() -> bool:
        found[:] = [pid for pid, state in _role_backends(pg) if state == "active"]
        return bool(found)

    _wait_until(active)
    return found[0]


def _wait_until(condition: Callable[[], bool], attempts: int = 500) -> None:
    for _ in range(attempts):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM (SELECT g FROM (SELECT generate_series(1, 10000000) g) s ORDER BY g DESC) x",
        "SELECT count(*) FROM (SELECT g % 1000000 AS k, count(*) FROM (SELECT generate_series(1, 10000000) g) s "
        "GROUP BY 1) x",
        "SELECT count(DISTINCT g) FROM (SELECT generate_series(1, 10000000) g) s",
        "SELECT count(*) FROM (SELECT generate_series(1, 3000000) g) a JOIN (SELECT generate_series(1, 3000000) g) b "
        "USING (g)",
    ],
)
def test_a_backend_needing_memory_for_sorts_and_hashes_stays_small(
    pg: PgDatabase, pg_ids: dict[str, list[int]], sql: str
) -> None:
    """Sorts and hashes spill to temporary files past work_mem and stop at temp_file_limit:
    the restricted backend's peak resident memory (VmHWM of the real PostgreSQL process,
    read while the statement runs) stays far below what the data would take in memory."""
    peaks: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for pid, _ in _role_backends(pg):
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                peaks.extend(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        failure = assert_refused(pg, sql, {INVALID, TIMEOUT})
    finally:
        done.set()
        watcher.join()
    assert "temp_file_limit" in failure.message or "ran longer" in failure.message, failure.message
    assert peaks, "the restricted backend was never seen"
    assert max(peaks) < MEMORY_BOUND_KB, max(peaks)


MEMORY_BOUND_KB = 64 * 1024  # work_mem 4 MB (hash_mem_multiplier 1) plus the backend's own ~15 MB


def test_a_user_looping_slow_statements_holds_no_more_than_its_share(
    pg: PgDatabase, pg_ids: dict[str, list[int]]
) -> None:
    """Two places, Alice asks for four slow statements at once: she holds both places and two
    of hers wait. Bob's one statement takes the next free place ahead of Alice's queue, and each
    statement still gets its whole deadline (it counts from the statement's start, not from
    the wait): Alice's four all end TIMEOUT, none BUSY."""
    pg.backend.memory_gate = gate = FairGate(2)
    finished: list[tuple[str, object]] = []
    lock = threading.Lock()

    def call(who: str, user: int, sql: str) -> None:
        try:
            outcome: object = run_memory_sql(pg, user, sql, deadline_s=1.0)
        except ToolFailure as failure:
            outcome = failure.code
        with lock:
            finished.append((who, outcome))

    alice = [threading.Thread(target=call, args=("alice", ALICE, SLOW_QUERY)) for _ in range(4)]
    for thread in alice:
        thread.start()
    _wait_until(lambda: gate.held() == {ALICE: 2} and gate.waiting() == 2)
    bob = threading.Thread(target=call, args=("bob", BOB, "SELECT count(*) FROM memories"))
    bob.start()
    for thread in [*alice, bob]:
        thread.join(HANG_S * 3)
    order = [who for who, _ in finished]
    assert len(order) == 5 and order.index("bob") <= 2, order  # after Alice's first two, before her queue
    bob_answer = next(outcome for who, outcome in finished if who == "bob")
    assert getattr(bob_answer, "rows", None) == [[2]], bob_answer
    assert [outcome for who, outcome in finished if who == "alice"] == [TIMEOUT] * 4
