"""`/memory_sql` on PostgreSQL: one model-written statement, run as the restricted role.

What the statement may touch is decided by PostgreSQL's privileges (set up by
`storage.pg_confinement`): the role sees only the views `messages` and `memories` of the user
bound to its backend, may update only memories' content and importance, and can call no
function with a side effect or a view of the database. This module only decides how the
statement runs and bounds what comes back, always on a fresh login of that role (so no
session state, such as a lock or a setting, outlives one call):

1. In a `READ ONLY` transaction, PostgreSQL parses the text as one prepared statement (the
   extended protocol refuses a second statement), then `EXPLAIN` (planned, not run) says
   what it is: an UPDATE of `memory_sql.memories`, or a query. Anything `EXPLAIN` does not
   take (SET, COPY, DO, LOAD, transaction control…) is refused there.
2. A query runs in that read-only transaction through a server-side cursor, wrapped as
   `SELECT q.* FROM (<sql>) q WHERE memory_sql.row_fits(pg_column_size(q.*))`, so a row over
   1 MB is an error on the server instead of a megabyte in this process; rows are fetched
   a few at a time, at most `max_rows` and a byte budget (the cells cut as on SQLite).
3. An UPDATE runs in a read-write transaction of its own whose INSTEAD OF trigger checks each
   row and only records the change (no row is locked or written while the WHERE runs); more
   than `max_update_rows` rows matched is refused; the transaction is always rolled back, and
   `tools.memory_sql` writes the recorded changes with `apply_changes` in one short
   transaction, as on SQLite (a memory changed meanwhile is not overwritten).

`statement_timeout` (the time left of the deadline, counted from the statement's start) bounds
each step inside PostgreSQL, and a supervisor stops it from outside at the deadline whatever it
is doing (`_Supervisor`: a cancel, then the connection cut off and the backend terminated), so
the caller never waits past the deadline by more than `TERMINATE_AFTER_S`. Code that never
looks at PostgreSQL's cancel flag (libxml2) is not allowed to start: the confinement's function
allow-list, and `_refuse_xml` for XML syntax that calls no function. `work_mem`,
`temp_file_limit` and `lock_timeout` are the role's settings. The errors the model sees use
the SQLite path's wording and codes (`bounded/sql_values.py`, `bounded/sql_memory.RULE`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import date, datetime
from datetime import time as clock_time
from decimal import Decimal
from typing import Any, Literal, Protocol

import psycopg
from psycopg import errors as pg_errors
from psycopg.conninfo import make_conninfo
from psycopg.pq import ExecStatus
from psycopg.types.string import TextLoader

from bounded.sql_fetch import cell_size, preview_cell
from bounded.sql_memory import ANSWER_BUDGET_BYTES, RULE, STORED_CELL_CHARS
from bounded.sql_values import Change, ErrorCode, MemoryAnswer, SqlError, timeout_error
from foundation.cancellation import NEVER, Cancelled, CancelToken
from foundation.fair_share import FairGate
from storage.connection import DbConnection
from storage.errors import StorageError
from storage.pg_confinement import CAP, CHANGES, ROW_BYTES, SCHEMA, Login, bind, read_login, unbind

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5
FETCH_BATCH = 16  # rows per FETCH: at most 16 MB held at once (rows are at most 1 MB)
CURSOR = "memory_sql_rows"
CONNECTIONS = 4  # statements at once per server process (the role's CONNECTION LIMIT bounds every process)
PLACE_WAIT_S = 5.0  # how long a call waits for one of them before it answers BUSY
TERMINATE_AFTER_S = 0.3  # after the cancel, how long the backend has to answer before it is cut off
NOT_SET_UP = SqlError(
    "UNAVAILABLE",
    "/memory_sql is not set up on this PostgreSQL database (its confinement step needs a superuser); "
    "ask the administrator to run `python -m storage.pg_memory_sql`.",
)
ONLY_SELECT_OR_UPDATE = SqlError("PERMISSION_DENIED", f"only SELECT or UPDATE memories can run. {RULE}")


class PgStore(Protocol):
    """What this runner needs of `storage.pg.PgDatabase`: its URL and trusted connections."""

    @property
    def url(self) -> str: ...

    def connection(self) -> AbstractContextManager[DbConnection]: ...


class _Refused(Exception):
    def __init__(self, error: SqlError) -> None:
        super().__init__(error.message)
        self.error = error


def run_pg_memory(
    store: PgStore,
    user_id: int,
    sql: str,
    *,
    deadline_s: float,
    max_rows: int,
    max_update_rows: int,
    cancel: CancelToken = NEVER,
    gate: FairGate | None = None,
    dry_run: bool = False,
) -> MemoryAnswer | SqlError:
    """Run `sql` for `user_id` as the restricted role, holding one of `gate`'s places (a fair
    share of the role's connections among users); raises Cancelled when `cancel` fired."""
    if "\x00" in sql or not sql.strip():
        return SqlError("VALIDATION_FAILED", f"give one SQL statement (no NUL characters). {RULE}")
    cancel.raise_if_cancelled()
    if gate is None:
        return _run(store, user_id, sql, deadline_s, max_rows, max_update_rows, cancel, dry_run)
    if not gate.acquire(user_id, time.monotonic() + PLACE_WAIT_S, cancel):
        if cancel.cancelled:
            raise Cancelled(cancel.reason or "cancelled")
        return SqlError("BUSY", f"all {gate.capacity} /memory_sql connections stayed busy for {PLACE_WAIT_S:g} s")
    try:  # the deadline counts from here: the wait for a place is not the statement's time
        return _run(store, user_id, sql, deadline_s, max_rows, max_update_rows, cancel, dry_run)
    finally:
        gate.release(user_id)


def _run(
    store: PgStore,
    user_id: int,
    sql: str,
    deadline_s: float,
    max_rows: int,
    max_update_rows: int,
    cancel: CancelToken,
    dry_run: bool,
) -> MemoryAnswer | SqlError:
    try:
        with store.connection() as app:
            login = read_login(app)
    except StorageError as error:  # the app's own database is down or busy
        return _unavailable(error)
    if login is None:
        return NOT_SET_UP
    try:
        conn = _connect(store.url, login)
    except psycopg.Error as error:
        return _unavailable(error)
    pid = conn.info.backend_pid
    supervisor: _Supervisor | None = None
    remove: Callable[[], None] = _nothing
    try:
        with store.connection() as app:
            bind(app, pid, user_id)
        stop_at = time.monotonic() + deadline_s  # the deadline counts from the statement's start
        supervisor = _Supervisor(store, conn, login.role, stop_at)
        remove = cancel.on_cancel(supervisor.wake)
        supervisor.start()
        return _execute(conn, sql, stop_at, max_rows, max_update_rows, dry_run)
    except _Refused as refused:
        return refused.error
    except psycopg.Error as error:
        if cancel.cancelled:
            raise Cancelled(cancel.reason or "cancelled") from None
        if supervisor is not None and supervisor.stepped_in:
            return timeout_error(deadline_s)
        return explain_error(error, deadline_s)
    except StorageError as error:  # binding failed: nothing ran
        return _unavailable(error)
    finally:
        remove()
        if supervisor is not None:
            supervisor.finish()  # before the close: the socket is not cut once it may be reused
        conn.close()  # never reused: each call logs in afresh
        _unbind_quietly(store, pid)


class _Supervisor(threading.Thread):
    """Stops the statement from outside it, so the caller never waits past the deadline.

    At the deadline (or when the turn is cancelled) the backend is sent a cancel request;
    PostgreSQL acts on it only where the running code checks its cancel flag. If the caller
    still has no answer `TERMINATE_AFTER_S` later, its connection's socket is shut down here
    (its blocked read returns at once, and the connection is thrown away) and, from the app's
    own connection, `pg_terminate_backend` ends the backend as soon as it looks at its flags.
    """

    def __init__(self, store: PgStore, conn: psycopg.Connection[Any], role: str, stop_at: float) -> None:
        super().__init__(name=f"memory_sql-supervisor-{conn.info.backend_pid}", daemon=True)
        self.store = store
        self.conn = conn
        self.role = role
        self.pid = conn.info.backend_pid
        self.socket = conn.pgconn.socket
        self.stop_at = stop_at
        self.stepped_in = False  # the deadline or a cancel came first: the caller's error is a timeout
        self._woken = threading.Event()
        self._lock = threading.Lock()
        self._finished = False

    def wake(self) -> None:
        """The turn was cancelled: act now rather than at the deadline."""
        self._woken.set()

    def finish(self) -> None:
        """The caller has its answer (or error): nothing left to stop."""
        with self._lock:
            self._finished = True
        self._woken.set()

    def run(self) -> None:
        self._woken.wait(max(0.0, self.stop_at - time.monotonic()))
        with self._lock:
            if self._finished:
                return
            self.stepped_in = True
        _cancel_backend(self.conn)
        if self._wait_finished(TERMINATE_AFTER_S):
            return
        with self._lock:
            if self._finished:
                return
            _cut(self.socket)  # the caller returns now, whatever the backend does
        self._terminate()

    def _wait_finished(self, seconds: float) -> bool:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            with self._lock:
                if self._finished:
                    return True
            time.sleep(min(0.02, max(0.0, until - time.monotonic())))
        with self._lock:
            return self._finished

    def _terminate(self) -> None:
        """`pg_terminate_backend` from the app's connection, if the backend is still ours."""
        try:
            with self.store.connection() as app:
                app.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = ? AND usename = ?",
                    (self.pid, self.role),
                )
        except StorageError:
            log.warning("memory_sql: could not terminate backend %s", self.pid, exc_info=True)


def _cut(fd: int) -> None:
    """Shut the connection's socket down (a duplicate of its descriptor, closed after), so a
    read blocked on it returns at once."""
    try:
        with socket.socket(fileno=os.dup(fd)) as dup:
            dup.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the server


def _nothing() -> None:
    pass


def _unbind_quietly(store: PgStore, pid: int) -> None:
    """Drop the binding of the closed backend. If that fails it is harmless: no backend of the
    role runs a statement before its own binding replaces whatever its pid had."""
    try:
        with store.connection() as app:
            unbind(app, pid)
    except StorageError:
        log.warning("memory_sql: could not drop the binding of backend %s", pid, exc_info=True)


def _unavailable(error: BaseException) -> SqlError:
    return SqlError("UNAVAILABLE", f"the SQL engine cannot run the query now ({_first_line(error)}); try again later.")


def _connect(url: str, login: Login) -> psycopg.Connection[tuple[Any, ...]]:
    info = make_conninfo(
        url, user=login.role, password=login.password, application_name="memory_sql", connect_timeout=CONNECT_TIMEOUT_S
    )
    conn = psycopg.connect(info, autocommit=True, prepare_threshold=None)
    for name in ("json", "jsonb"):  # JSON values stay text, as SQLite's json functions return them
        conn.adapters.register_loader(name, TextLoader)
    return conn


def _cancel_backend(conn: psycopg.Connection[Any]) -> None:
    """PostgreSQL's own cancel request (a connection of its own, keyed by the backend: no
    privilege and no pooled connection needed, so it cannot wait behind the app's work)."""
    try:
        conn.cancel_safe(timeout=TERMINATE_AFTER_S)
    except (psycopg.Error, OSError):
        pass  # the connection is closing or gone: nothing left to stop


def _execute(
    conn: psycopg.Connection[Any], sql: str, stop_at: float, max_rows: int, max_update_rows: int, dry_run: bool
) -> MemoryAnswer:
    text = sql.encode()
    _begin(conn, "READ ONLY", stop_at)
    _checked(conn, conn.pgconn.prepare(b"", text))  # one statement, parsed (syntax, names)
    kind = _classify(conn, text)
    if dry_run and kind == "select":  # PostgreSQL's own plan decides whether a call asks (SPEC 8)
        conn.execute("ROLLBACK")
        return MemoryAnswer(kind=kind, columns=[], rows=[], truncated=False)
    if kind == "select":
        return _select(conn, sql, max_rows)
    conn.execute("ROLLBACK")
    _begin(conn, "READ WRITE", stop_at)  # the trigger records into transaction-local settings
    conn.execute(f"SET LOCAL {CAP} = {int(max_update_rows)}")
    result = _checked(conn, conn.pgconn.exec_params(text, None))
    if result.nfields:  # RETURNING: refused as on SQLite, where it cannot report the ids
        conn.execute("ROLLBACK")
        raise _Refused(SqlError("VALIDATION_FAILED", "UPDATE … RETURNING is not supported; SELECT afterwards."))
    matched = int(result.command_tuples or 0)
    if matched > max_update_rows:
        conn.execute("ROLLBACK")
        raise _Refused(
            SqlError(
                "PERMISSION_DENIED",
                f"UPDATE would change {matched} > {max_update_rows} memories; narrow the WHERE. Nothing was changed.",
            )
        )
    recorded = conn.execute(f"SHOW {CHANGES}").fetchone() if matched else None
    conn.execute("ROLLBACK")  # nothing was written: the app applies the changes (apply_changes)
    # one JSON object a line: JSON escapes "\n" inside its strings, but not U+2028, U+2029 or
    # U+0085, which str.splitlines() would also take as line ends
    lines = str(recorded[0] if recorded else "").split("\n")
    changes = [_change(json.loads(line)) for line in lines if line]
    return MemoryAnswer(kind="update", columns=[], rows=[], truncated=False, changes=changes)


def _change(row: dict[str, Any]) -> Change:
    return Change(
        id=int(row["id"]),
        old_content=str(row["old_content"]),
        old_importance=int(row["old_importance"]),
        content=str(row["content"]),
        importance=int(row["importance"]),
    )


def _begin(conn: psycopg.Connection[Any], mode: str, stop_at: float) -> None:
    left_ms = max(1, int((stop_at - time.monotonic()) * 1000))
    conn.execute(f"BEGIN {mode}")
    conn.execute(f"SET LOCAL statement_timeout = {left_ms}")


def _classify(conn: psycopg.Connection[Any], text: bytes) -> Literal["select", "update"]:
    """PostgreSQL's plan of the statement (not run): an UPDATE of our `memories`, or a query."""
    try:
        result = _checked(conn, conn.pgconn.exec_params(b"EXPLAIN (VERBOSE, FORMAT JSON) " + text, None))
    except pg_errors.SyntaxError:
        raise _Refused(ONLY_SELECT_OR_UPDATE) from None  # parsed alone, but not a plannable statement
    value = result.get_value(0, 0)
    plan = json.loads(bytes(value or b"[]"))[0]["Plan"]
    _refuse_xml(plan)
    if plan.get("Node Type") != "ModifyTable":
        return "select"
    if (plan.get("Operation"), plan.get("Schema"), plan.get("Relation Name")) == ("Update", SCHEMA, "memories"):
        return "update"
    raise _Refused(ONLY_SELECT_OR_UPDATE)


def _refuse_xml(node: Any) -> None:
    """Refuse XML syntax the plan shows: libxml2 never looks at PostgreSQL's cancel flag, and
    XMLTABLE and XMLPARSE call no function, so EXECUTE privileges (the confinement's function
    allow-list, which already refuses xpath() and every function of the xml type) cannot stop
    them. An XMLTABLE is its own plan node; the other XML expressions are read in PostgreSQL's
    own rendering of the plan's expressions, quoted literals and names left out (so text that
    merely mentions XMLPARSE is allowed)."""
    if isinstance(node, dict):
        if node.get("Node Type") == "Table Function Scan":
            raise _Refused(_no_xml(str(node.get("Table Function Name") or "xmltable").upper()))
        for item in node.values():
            _refuse_xml(item)
    elif isinstance(node, list):
        for item in node:
            _refuse_xml(item)
    elif isinstance(node, str):
        found = _XML_SYNTAX.search(_QUOTED.sub(" ", node))
        if found:
            raise _Refused(_no_xml(next(group for group in found.groups() if group)))


def _no_xml(what: str) -> SqlError:
    return SqlError("PERMISSION_DENIED", f"{what} is not available: /memory_sql has no XML functions. {RULE}")


# PostgreSQL's rendering of literals and names; a doubled quote inside one is two matches in a
# row, and each match is one character-class run, linear even over a constant folded to megabytes
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_XML_SYNTAX = re.compile(r"\b(XML[A-Z]+)\(|\b(IS (?:NOT )?DOCUMENT)\b|(::xml)\b")


def _select(conn: psycopg.Connection[Any], sql: str, max_rows: int) -> MemoryAnswer:
    body = sql.rstrip().rstrip(";")
    wrapped = f"SELECT q.* FROM (\n{body}\n) AS q WHERE {SCHEMA}.row_fits(pg_column_size(q.*))"
    declare = f"DECLARE {CURSOR} NO SCROLL CURSOR FOR {wrapped}".encode()
    try:
        _checked(conn, conn.pgconn.exec_params(declare, None))
    except pg_errors.SyntaxError:
        raise _Refused(ONLY_SELECT_OR_UPDATE) from None  # planned, but not a query (CREATE TABLE AS, DECLARE)
    rows: list[list[Any]] = []
    used = 0
    columns: list[str] = []
    with conn.cursor() as cursor:
        while True:
            cursor.execute(f"FETCH FORWARD {FETCH_BATCH} FROM {CURSOR}")
            columns = [column.name for column in cursor.description or ()]
            batch = cursor.fetchall()
            for raw in batch:
                if len(rows) >= max_rows:
                    return _rolled_back(conn, _selected(columns, rows, "rows"))
                row: list[Any] = []
                for value in raw:
                    cell = preview_cell(_plain(value), STORED_CELL_CHARS)
                    used += cell_size(cell)
                    if used > ANSWER_BUDGET_BYTES:
                        if not rows:
                            rows.append(row + ["…"] * (len(raw) - len(row)))
                        return _rolled_back(conn, _selected(columns, rows, "bytes"))
                    row.append(cell)
                rows.append(row)
            if len(batch) < FETCH_BATCH:
                return _rolled_back(conn, _selected(columns, rows, ""))


def _selected(columns: list[str], rows: list[list[Any]], truncated_by: Literal["rows", "bytes", ""]) -> MemoryAnswer:
    return MemoryAnswer("select", columns, rows, bool(truncated_by), truncated_by)


def _rolled_back(conn: psycopg.Connection[Any], answer: MemoryAnswer) -> MemoryAnswer:
    conn.execute("ROLLBACK")
    return answer


def _plain(value: Any) -> Any:
    """A PostgreSQL value as the JSON-safe cell SQLite would give: numbers, text, bytes, None."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and abs(value) < 2**63 else float(value)
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, (datetime, date, clock_time)):
        return value.isoformat()
    if isinstance(value, (list, tuple, dict)):  # arrays and records: JSON text, as SQLite's json functions give
        return json.dumps(_jsonable(value), ensure_ascii=False)
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    plain = _plain(value)
    return plain.hex() if isinstance(plain, bytes) else plain


def _checked(conn: psycopg.Connection[Any], result: Any) -> Any:
    """The libpq result, or its error raised as psycopg's exception class for its SQLSTATE."""
    if result.status in (ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK):
        return result
    raise pg_errors.error_from_result(result, encoding=conn.info.encoding)


# SQLSTATE -> (code, what to tell the model); `{pg}` is PostgreSQL's own message
_BY_STATE: dict[str, tuple[ErrorCode, str]] = {
    "42501": ("PERMISSION_DENIED", "{pg}. " + RULE),  # insufficient_privilege
    "42P01": ("PERMISSION_DENIED", "{pg} or is not available. " + RULE),  # undefined_table: not in our schema
    "42883": ("PERMISSION_DENIED", "{pg} or is not available. " + RULE),  # undefined_function
    "25006": ("PERMISSION_DENIED", "{pg}. " + RULE),  # read_only_sql_transaction (a write inside a query)
    "23514": ("VALIDATION_FAILED", "{pg}; nothing was changed."),  # check_violation (the UPDATE trigger)
    "54000": (  # program_limit_exceeded (row_fits, arrays, strings)
        "TOO_LARGE",
        "PostgreSQL says: {pg}. Rows are at most " + str(ROW_BYTES // (1024 * 1024)) + " MB; "
        "select fewer or shorter values.",
    ),
    "53400": (  # configuration_limit_exceeded: temp_file_limit
        "TOO_LARGE",
        "the query needs more memory than allowed ({pg}); add a LIMIT or select fewer or shorter values.",
    ),
    "53200": ("TOO_LARGE", "the query needs more memory than allowed; add a LIMIT or select fewer or shorter values."),
    "55P03": ("UNAVAILABLE", "these memories are being changed by another request; try again."),  # lock_not_available
}


def explain_error(error: psycopg.Error, deadline_s: float) -> SqlError:
    """Translate a PostgreSQL error into the model's message, in the SQLite path's words."""
    state = error.sqlstate or ""
    text = _first_line(error).rstrip(".")
    if state == "57014":  # query_canceled: statement_timeout, or the supervisor at the deadline
        return timeout_error(deadline_s)
    if "cannot insert multiple commands" in text:
        return SqlError("VALIDATION_FAILED", f"one statement only. {RULE}")
    if state in _BY_STATE:
        code, words = _BY_STATE[state]
        return SqlError(code, words.format(pg=text))
    if state.startswith(("08", "57")) or not state:
        return SqlError("UNAVAILABLE", f"the SQL engine cannot run the query now ({text}); try again later.")
    return SqlError("VALIDATION_FAILED", f"PostgreSQL says: {text}. {RULE}")


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
