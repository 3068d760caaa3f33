"""`/memory_sql` inside the worker: the per-user views, the authorizer, one statement (SPEC 6a).

The model sees two TEMP views on a connection of its own, `messages` and `memories`,
filtered to one user. What a statement may touch is decided by SQLite itself through an
authorizer (`Authorizer`), never by matching keywords, so `LIKE '%delete%'` is just text.
The database file is opened read-only (`mode=ro`): even a statement the authorizer let
through could not write it, and no write lock is ever held while model SQL runs.

Why the views are two layers deep: for reads inside a view SQLite passes the FROM-item name
as the authorizer's context, and a CTE can take any name (`WITH messages AS (SELECT … FROM
api_tokens) …` reaches the authorizer as a read of api_tokens "inside messages"). So the
public views read from inner views with a random per-call name, and base tables may only be
read in the context of those secret names; the trigger and pending table are named the same way.

Why an UPDATE only records: the INSTEAD OF trigger validates each row and records the old
and new values in a TEMP table (writable on a read-only connection). The worker returns
those changes (at most `max_update_rows`, else a refusal) and the server applies them in one
short write transaction of its own (`tools/memory_sql.py`), so however long the WHERE runs,
it runs outside any write lock, and the FTS5 sync triggers never meet the authorizer.

Phases: (1) `EXPLAIN <sql>` compiles the statement under the authorizer without running it
and classifies it (SELECT or UPDATE memories; anything with neither, such as REINDEX or
VACUUM, which raise no authorizer event, is refused); (2) the same text runs under the same
authorizer, SQLite's limits (`sql_limits.py`), a progress-handler deadline and a byte budget.

A `dry_run` job (whether a call asks its user first, SPEC 8) stops after phase 1 for a SELECT;
an UPDATE runs phase 2 as it always does, recording its changes and writing nothing, so every
refusal of the engine (a value out of range, RETURNING, too many rows) comes before the question.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from bounded.sql_fetch import fetch_preview
from bounded.sql_limits import MB, EngineLimits, apply_heap_limit, apply_statement_limits
from bounded.sql_values import Change, MemoryAnswer, MemoryJob, SqlError, timeout_error

VIEW_COLUMNS: dict[str, tuple[str, ...]] = {
    "messages": ("id", "session_id", "role", "content", "created_at"),
    "memories": ("id", "content", "importance", "created_at", "updated_at"),
}
BASE_TABLES = {"messages": "chat_messages", "memories": "user_memories"}
UPDATABLE_COLUMNS = frozenset({"content", "importance"})
MAX_MEMORY_CHARS = 2000  # same bound as /remember
IMPORTANCE_RANGE = (1, 10)  # same scale as /remember
LIMITS = EngineLimits(value_bytes=1 * MB)  # a stored message is far smaller (SPEC 12: 64 KiB results)
STORED_CELL_CHARS = 2000  # text cells kept in the answer
ANSWER_BUDGET_BYTES = 128 * 1024  # all cells of the answer (SPEC 12: structured output at most 256 KiB)
PROGRESS_EVERY_OPS = 1000

RULE = (
    "Allowed: one SELECT over messages("
    + ", ".join(VIEW_COLUMNS["messages"])
    + ") and memories("
    + ", ".join(VIEW_COLUMNS["memories"])
    + "), or one UPDATE memories SET content=…, importance=… WHERE …."
)

# Built-ins that only compute on their arguments: no schema, files, extensions or tokenizers.
SAFE_FUNCTIONS = frozenset(
    [
        "abs",
        "char",
        "coalesce",
        "format",
        "glob",
        "hex",
        "ifnull",
        "iif",
        "instr",
        "length",
        "like",
        "likelihood",
        "likely",
        "lower",
        "ltrim",
        "max",
        "min",
        "nullif",
        "printf",
        "quote",
        "random",
        "randomblob",
        "replace",
        "round",
        "rtrim",
        "sign",
        "soundex",
        "substr",
        "substring",
        "trim",
        "typeof",
        "unicode",
        "unlikely",
        "upper",
        "zeroblob",
        "avg",
        "count",
        "group_concat",
        "string_agg",
        "sum",
        "total",
        "row_number",
        "rank",
        "dense_rank",
        "percent_rank",
        "cume_dist",
        "ntile",
        "lag",
        "lead",
        "first_value",
        "last_value",
        "nth_value",
        "date",
        "time",
        "datetime",
        "julianday",
        "unixepoch",
        "strftime",
        "timediff",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atan",
        "atan2",
        "atanh",
        "ceil",
        "ceiling",
        "cos",
        "cosh",
        "degrees",
        "exp",
        "floor",
        "ln",
        "log",
        "log2",
        "log10",
        "mod",
        "pi",
        "pow",
        "power",
        "radians",
        "sin",
        "sinh",
        "sqrt",
        "tan",
        "tanh",
        "trunc",
        "json",
        "json_array",
        "json_array_length",
        "json_extract",
        "json_insert",
        "json_object",
        "json_patch",
        "json_remove",
        "json_replace",
        "json_set",
        "json_type",
        "json_valid",
        "json_quote",
        "json_group_array",
        "json_group_object",
        "->",
        "->>",
    ]
)
TABLE_FUNCTIONS = frozenset({"json_each", "json_tree"})  # pre-initialised before the authorizer

_ACTION_NAMES = {  # for refusal messages, e.g. "DROP TABLE is not allowed"
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in [
        "CREATE_INDEX",
        "CREATE_TABLE",
        "CREATE_TEMP_INDEX",
        "CREATE_TEMP_TABLE",
        "CREATE_TEMP_TRIGGER",
        "CREATE_TEMP_VIEW",
        "CREATE_TRIGGER",
        "CREATE_VIEW",
        "DELETE",
        "DROP_INDEX",
        "DROP_TABLE",
        "DROP_TEMP_INDEX",
        "DROP_TEMP_TABLE",
        "DROP_TEMP_TRIGGER",
        "DROP_TEMP_VIEW",
        "DROP_TRIGGER",
        "DROP_VIEW",
        "INSERT",
        "PRAGMA",
        "TRANSACTION",
        "ATTACH",
        "DETACH",
        "ALTER_TABLE",
        "REINDEX",
        "ANALYZE",
        "CREATE_VTABLE",
        "DROP_VTABLE",
        "SAVEPOINT",
    ]
}


class Refused(Exception):
    """The statement cannot run; `error` is what the model is told."""

    def __init__(self, error: SqlError) -> None:
        super().__init__(error.message)
        self.error = error


class Authorizer:
    """Allow-list for one call. Records the first refusal so the error can name it."""

    def __init__(self, prefix: str, schema_names: frozenset[str]) -> None:
        self.schema_names = schema_names  # lower-cased names of real tables, views and sqlite_*
        self.inner = {f"{prefix}_msg": BASE_TABLES["messages"], f"{prefix}_mem": BASE_TABLES["memories"]}
        self.trigger = f"{prefix}_trg"
        self.pending = f"{prefix}_pending"
        self.denied: str | None = None
        self.saw_select = False
        self.saw_update = False

    def __call__(self, action: int, arg1: str | None, arg2: str | None, db: str | None, context: str | None) -> int:
        reason = self._check(action, arg1, arg2, db, context)
        if reason is None:
            return sqlite3.SQLITE_OK
        if self.denied is None:
            self.denied = reason
        return sqlite3.SQLITE_DENY

    def _check(
        self, action: int, arg1: str | None, arg2: str | None, db: str | None, context: str | None
    ) -> str | None:
        if action == sqlite3.SQLITE_SELECT:
            self.saw_select = True
            return None
        if action == sqlite3.SQLITE_RECURSIVE:
            return None  # runaway CTEs are stopped by the deadline and the heap limit
        if action == sqlite3.SQLITE_FUNCTION:
            name = (arg2 or "").lower()
            return None if name in SAFE_FUNCTIONS else f"function {arg2}() is not allowed"
        if action == sqlite3.SQLITE_READ:
            return self._check_read(arg1 or "", arg2 or "", db, context)
        if action == sqlite3.SQLITE_UPDATE:
            if db == "temp" and arg1 == "memories":
                if arg2 in UPDATABLE_COLUMNS:
                    self.saw_update = True
                    return None
                return f"column memories.{arg2} cannot be changed; only content and importance can"
            if arg1 in ("sqlite_master", "sqlite_temp_master"):  # first use of a virtual table
                return "schema access (sqlite_master, pragma_*() functions, virtual tables) is not allowed"
            if arg1 == "messages":
                return "messages is read-only; only memories(content, importance) can be updated"
            return f"table {arg1} cannot be changed"
        if action == sqlite3.SQLITE_INSERT and db == "temp" and arg1 == self.pending and context == self.trigger:
            return None
        return f"{_ACTION_NAMES.get(action, f'action {action}')} is not allowed"

    def _check_read(self, table: str, column: str, db: str | None, context: str | None) -> str | None:
        if db == "temp" and (table in self.inner or column in VIEW_COLUMNS.get(table, ())):
            return None  # the per-user views, in any context: they only hold this user's rows
        if db == "main" and context in self.inner and table == self.inner[context]:
            return None  # the secret inner view reading its base table (a CTE cannot take this name)
        if table in TABLE_FUNCTIONS:
            return None
        if db is None and column == "" and table.lower() not in self.schema_names:
            return None  # a CTE used without reading a column, e.g. count(*) FROM cte
        if table in VIEW_COLUMNS:
            return f"column {table}.{column} does not exist"
        if table.startswith("pragma_"):
            return f"{table}() is not allowed"
        return f"table {table} is not available"


def open_read_only(database_path: str) -> sqlite3.Connection:
    """The database file, read-only: the process cannot write it whatever a statement says."""
    uri = f"file:{quote(str(Path(database_path).resolve()))}?mode=ro"
    return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5)


def create_views(conn: sqlite3.Connection, prefix: str, user_id: int) -> frozenset[str]:
    """Create the per-user TEMP objects (gone when the connection closes); return schema names."""
    msg_cols, mem_cols = ", ".join(VIEW_COLUMNS["messages"]), ", ".join(VIEW_COLUMNS["memories"])
    low, high = IMPORTANCE_RANGE
    for statement in (
        f"CREATE TEMP VIEW {prefix}_msg AS SELECT {msg_cols} FROM main.chat_messages WHERE user_id = {user_id}",
        f"CREATE TEMP VIEW messages AS SELECT {msg_cols} FROM temp.{prefix}_msg",
        f"CREATE TEMP VIEW {prefix}_mem AS SELECT {mem_cols} FROM main.user_memories WHERE user_id = {user_id}",
        f"CREATE TEMP VIEW memories AS SELECT {mem_cols} FROM temp.{prefix}_mem",
        f"""CREATE TEMP TABLE {prefix}_pending (id INTEGER PRIMARY KEY, old_content TEXT, old_importance INTEGER,
            content TEXT NOT NULL, importance INTEGER NOT NULL)""",
        f"""CREATE TEMP TRIGGER {prefix}_trg INSTEAD OF UPDATE ON memories BEGIN
            SELECT RAISE(ABORT, 'content must be non-empty text of at most {MAX_MEMORY_CHARS} characters')
              WHERE NEW.content IS NOT OLD.content AND (typeof(NEW.content) <> 'text'
                OR trim(NEW.content) = '' OR length(NEW.content) > {MAX_MEMORY_CHARS});
            SELECT RAISE(ABORT, 'importance must be an integer from {low} to {high}')
              WHERE NEW.importance IS NOT OLD.importance AND (typeof(NEW.importance) <> 'integer'
                OR NEW.importance NOT BETWEEN {low} AND {high});
            INSERT INTO {prefix}_pending (id, old_content, old_importance, content, importance)
              VALUES (OLD.id, OLD.content, OLD.importance, NEW.content, NEW.importance);
        END""",
        "SELECT count(*) FROM json_each('[]')",  # first use of an eponymous table raises a
        "SELECT count(*) FROM json_tree('[]')",  # schema-write event; get it over with now
    ):
        conn.execute(statement)
    rows = conn.execute("SELECT name FROM main.sqlite_schema UNION SELECT name FROM temp.sqlite_schema")
    names = {row[0].lower() for row in rows} | {"sqlite_master", "sqlite_temp_master", "sqlite_schema"}
    return frozenset(names - set(VIEW_COLUMNS))


def explain_error(error: BaseException, auth: Authorizer, deadline_s: float) -> SqlError:
    """Translate an sqlite3 error into the message the model sees, with the rule to follow."""
    text = str(error).rstrip(".")
    if auth.denied is not None:
        return SqlError("PERMISSION_DENIED", f"{auth.denied}. {RULE}")
    if text == "interrupted":  # only our progress handler interrupts this connection
        return timeout_error(deadline_s)
    if "one statement at a time" in text:
        return SqlError("VALIDATION_FAILED", f"one statement only. {RULE}")
    if "because it is a view" in text:  # SQLite refuses DELETE/UPDATE of a trigger-less view itself
        return SqlError("PERMISSION_DENIED", f"{text}. {RULE}")
    if isinstance(error, sqlite3.IntegrityError):  # RAISE(ABORT) in the trigger: a bad value
        return SqlError("VALIDATION_FAILED", f"{text}; nothing was changed.")
    if "too big" in text or "too many columns" in text:
        return SqlError(
            "TOO_LARGE",
            f"SQLite says: {text}. Values are at most {LIMITS.value_bytes // MB} MB and "
            f"rows at most {LIMITS.columns} columns; select fewer or shorter values.",
        )
    return SqlError("VALIDATION_FAILED", f"SQLite says: {text}. {RULE}")


def run_memory_job(job: MemoryJob, started: Callable[[], None]) -> MemoryAnswer:
    """Run the job on a read-only connection; raises Refused with the model's error."""
    if "\x00" in job.sql or not job.sql.strip():
        raise Refused(SqlError("VALIDATION_FAILED", f"give one SQL statement (no NUL characters). {RULE}"))
    prefix = f"_msql_{secrets.token_hex(8)}"  # unguessable names, see the module docstring
    conn = open_read_only(job.database_path)
    try:
        apply_heap_limit(conn, LIMITS)
        auth = Authorizer(prefix, create_views(conn, prefix, int(job.user_id)))
        apply_statement_limits(conn, LIMITS)
        started()
        stop_at = time.monotonic() + job.deadline_s
        conn.set_progress_handler(lambda: int(time.monotonic() >= stop_at), PROGRESS_EVERY_OPS)
        try:
            return _execute(conn, auth, job)
        except (sqlite3.Error, sqlite3.Warning, UnicodeError, OverflowError) as error:
            raise Refused(explain_error(error, auth, job.deadline_s)) from None
    finally:
        conn.set_authorizer(None)
        conn.set_progress_handler(None, 0)
        conn.close()


def _execute(conn: sqlite3.Connection, auth: Authorizer, job: MemoryJob) -> MemoryAnswer:
    """Phase 1 (compile only), then phase 2 (run); an UPDATE only fills the pending table."""
    conn.set_authorizer(auth)
    conn.execute("EXPLAIN " + job.sql).close()  # compiles and authorizes the whole program, runs none of it
    if not (auth.saw_update or auth.saw_select):
        raise Refused(SqlError("PERMISSION_DENIED", f"only SELECT or UPDATE memories can run. {RULE}"))
    kind: Literal["select", "update"] = "update" if auth.saw_update else "select"
    if job.dry_run and kind == "select":  # SQLite's own reading decides whether a call asks (SPEC 8)
        return MemoryAnswer(kind=kind, columns=[], rows=[], truncated=False)
    cursor = conn.execute(job.sql)
    columns = [column[0] for column in cursor.description or ()]
    if kind == "update" and columns:  # RETURNING through an INSTEAD OF view reports NULL ids
        raise Refused(SqlError("VALIDATION_FAILED", "UPDATE … RETURNING is not supported; SELECT afterwards."))
    fetched = fetch_preview(cursor, job.max_rows, ANSWER_BUDGET_BYTES, STORED_CELL_CHARS) if columns else None
    cursor.close()
    conn.set_authorizer(None)
    if kind == "select":
        assert fetched is not None
        return MemoryAnswer(
            kind="select",
            columns=columns,
            rows=fetched.rows,
            truncated=bool(fetched.truncated_by),
            truncated_by=fetched.truncated_by,
        )
    matched = conn.execute(f"SELECT count(*) FROM temp.{auth.pending}").fetchone()[0]
    if matched > job.max_update_rows:
        raise Refused(
            SqlError(
                "PERMISSION_DENIED",
                f"UPDATE would change {matched} > {job.max_update_rows} memories; narrow the WHERE. Nothing was changed.",
            )
        )
    changes = [
        Change(*row)
        for row in conn.execute(
            f"SELECT id, old_content, old_importance, content, importance FROM temp.{auth.pending} ORDER BY id"
        )
    ]
    return MemoryAnswer(kind="update", columns=[], rows=[], truncated=False, changes=changes)
