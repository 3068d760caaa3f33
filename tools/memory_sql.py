"""`/memory_sql`: read-only SQL over the user's own data, plus `UPDATE memories` (SPEC 6a).

The model sees two TEMP views on a dedicated connection, `messages` and `memories`, filtered
to one user. What a statement may touch is decided by SQLite itself through an authorizer
(`_Authorizer`), never by matching keywords, so `LIKE '%delete%'` is just text.

Why the views are two layers deep: for reads inside a view SQLite passes the FROM-item name
as the authorizer's context, and a CTE can take any name (`WITH messages AS (SELECT … FROM
api_tokens) …` reaches the authorizer as a read of api_tokens "inside messages"). So the
public views read from inner views with a random per-call name, and base tables may only be
read in the context of those secret names; the trigger and pending table are named the same way.

Why UPDATE goes through a pending table: the INSTEAD OF trigger only validates each row and
records it; the base table is written afterwards by our own statement with the authorizer off.
The FTS5 sync triggers (and their shadow-table statements, which reach an authorizer with no
context at all) therefore never meet the authorizer, the 50-row cap is checked before any
base row or index is touched, and the authorizer needs no exceptions for FTS internals.

Phases: (1) `EXPLAIN <sql>` compiles the statement under the authorizer without running it
and classifies it (SELECT or UPDATE memories; anything with neither, such as REINDEX or
VACUUM, which raise no authorizer event, is refused); (2) the same text runs, inside
BEGIN … COMMIT, under the same authorizer, a wall-clock deadline and a row cap.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from typing import Any, Literal

from pydantic import Field

from storage.db import Database, utc_now
from tools.base import CommandBinding, ErrorCode, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput

VIEW_COLUMNS: dict[str, tuple[str, ...]] = {
    "messages": ("id", "session_id", "role", "content", "created_at"),
    "memories": ("id", "content", "importance", "created_at", "updated_at"),
}
BASE_TABLES = {"messages": "chat_messages", "memories": "user_memories"}
UPDATABLE_COLUMNS = frozenset({"content", "importance"})
MAX_MEMORY_CHARS = 2000  # same bound as /remember
IMPORTANCE_RANGE = (1, 10)  # same scale as /remember
MAX_VALUE_BYTES = 10_000_000  # SQLITE_LIMIT_LENGTH: no gigabyte zeroblob()/printf() strings
STORED_CELL_CHARS = 2000  # text cells kept in the stored result
RENDERED_CELL_CHARS = 200  # text cells shown in the rendered table
PROGRESS_EVERY_OPS = 1000

RULE = (
    "Allowed: one SELECT over messages(" + ", ".join(VIEW_COLUMNS["messages"]) + ") and memories("
    + ", ".join(VIEW_COLUMNS["memories"]) + "), or one UPDATE memories SET content=…, importance=… WHERE …."
)

# Built-ins that only compute on their arguments: no schema, files, extensions or tokenizers.
SAFE_FUNCTIONS = frozenset(
    """abs char coalesce format glob hex ifnull iif instr length like likelihood likely lower ltrim
    max min nullif printf quote random randomblob replace round rtrim sign soundex substr substring
    trim typeof unicode unlikely upper zeroblob avg count group_concat string_agg sum total
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value nth_value
    date time datetime julianday unixepoch strftime timediff acos acosh asin asinh atan atan2 atanh
    ceil ceiling cos cosh degrees exp floor ln log log2 log10 mod pi pow power radians sin sinh sqrt
    tan tanh trunc json json_array json_array_length json_extract json_insert json_object json_patch
    json_remove json_replace json_set json_type json_valid json_quote json_group_array
    json_group_object -> ->>""".split()
)
TABLE_FUNCTIONS = frozenset({"json_each", "json_tree"})  # pre-initialised before the authorizer

_ACTION_NAMES = {  # for refusal messages, e.g. "DROP TABLE is not allowed"
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ")
    for name in """CREATE_INDEX CREATE_TABLE CREATE_TEMP_INDEX CREATE_TEMP_TABLE CREATE_TEMP_TRIGGER CREATE_TEMP_VIEW
    CREATE_TRIGGER CREATE_VIEW DELETE DROP_INDEX DROP_TABLE DROP_TEMP_INDEX DROP_TEMP_TABLE DROP_TEMP_TRIGGER
    DROP_TEMP_VIEW DROP_TRIGGER DROP_VIEW INSERT PRAGMA TRANSACTION ATTACH DETACH ALTER_TABLE REINDEX ANALYZE
    CREATE_VTABLE DROP_VTABLE SAVEPOINT""".split()
}


class MemorySqlInput(ToolInput):
    sql: str = Field(min_length=1, max_length=10_000, description=(
        "One SELECT over the views messages and memories, or one UPDATE memories SET content/importance."))


class MemorySqlOutput(ToolOutput):
    kind: Literal["select", "update"]
    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool
    updated: int = 0

    def render(self) -> str:
        """A compact table, one line per row, cells JSON-quoted so newlines stay escaped."""
        lines: list[str] = []
        if self.columns:
            lines.append(" | ".join(self.columns))
            lines.extend(" | ".join(_render_cell(value) for value in row) for row in self.rows)
            cap = f", truncated at {self.row_count}" if self.truncated else ""
            lines.append(f"({self.row_count} row{'' if self.row_count == 1 else 's'}{cap})")
        if self.kind == "update":
            lines.append(f"Updated {self.updated} memor{'y' if self.updated == 1 else 'ies'}.")
        return "\n".join(lines)


def _render_cell(value: Any) -> str:
    text = "NULL" if value is None else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= RENDERED_CELL_CHARS else text[: RENDERED_CELL_CHARS - 1] + "…"


def _stored_cell(value: Any) -> Any:
    """Make a cell JSON-safe and bounded: blobs become a hex literal, long text is cut."""
    if isinstance(value, bytes):
        shown = value[:64].hex()
        return f"x'{shown}'" + ("…" if len(value) > 64 else "")
    if isinstance(value, str) and len(value) > STORED_CELL_CHARS:
        return value[:STORED_CELL_CHARS] + f"…[+{len(value) - STORED_CELL_CHARS} chars]"
    return value


class _Authorizer:
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

    def _check(self, action: int, arg1: str | None, arg2: str | None, db: str | None, context: str | None) -> str | None:
        if action == sqlite3.SQLITE_SELECT:
            self.saw_select = True
            return None
        if action == sqlite3.SQLITE_RECURSIVE:
            return None  # runaway CTEs are stopped by the deadline
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


def _create_views(conn: sqlite3.Connection, prefix: str, user_id: int) -> frozenset[str]:
    """Create the per-user TEMP objects (gone when the connection closes); return schema names."""
    msg_cols, mem_cols = ", ".join(VIEW_COLUMNS["messages"]), ", ".join(VIEW_COLUMNS["memories"])
    low, high = IMPORTANCE_RANGE
    for statement in (
        f"CREATE TEMP VIEW {prefix}_msg AS SELECT {msg_cols} FROM main.chat_messages WHERE user_id = {user_id}",
        f"CREATE TEMP VIEW messages AS SELECT {msg_cols} FROM temp.{prefix}_msg",
        f"CREATE TEMP VIEW {prefix}_mem AS SELECT {mem_cols} FROM main.user_memories WHERE user_id = {user_id}",
        f"CREATE TEMP VIEW memories AS SELECT {mem_cols} FROM temp.{prefix}_mem",
        f"CREATE TEMP TABLE {prefix}_pending (id INTEGER PRIMARY KEY, content TEXT NOT NULL, importance INTEGER NOT NULL)",
        f"""CREATE TEMP TRIGGER {prefix}_trg INSTEAD OF UPDATE ON memories BEGIN
            SELECT RAISE(ABORT, 'content must be non-empty text of at most {MAX_MEMORY_CHARS} characters')
              WHERE NEW.content IS NOT OLD.content AND (typeof(NEW.content) <> 'text'
                OR trim(NEW.content) = '' OR length(NEW.content) > {MAX_MEMORY_CHARS});
            SELECT RAISE(ABORT, 'importance must be an integer from {low} to {high}')
              WHERE NEW.importance IS NOT OLD.importance AND (typeof(NEW.importance) <> 'integer'
                OR NEW.importance NOT BETWEEN {low} AND {high});
            INSERT INTO {prefix}_pending (id, content, importance) VALUES (OLD.id, NEW.content, NEW.importance);
        END""",
        "SELECT count(*) FROM json_each('[]')",  # first use of an eponymous table raises a
        "SELECT count(*) FROM json_tree('[]')",  # schema-write event; get it over with now
    ):
        conn.execute(statement)
    rows = conn.execute("SELECT name FROM main.sqlite_schema UNION SELECT name FROM temp.sqlite_schema")
    names = {row[0].lower() for row in rows} | {"sqlite_master", "sqlite_temp_master", "sqlite_schema"}
    return frozenset(names - set(VIEW_COLUMNS))


def _failure(error: BaseException, auth: _Authorizer, deadline_s: float) -> ToolFailure:
    """Translate an sqlite3 error into the message the model sees, with the rule to follow."""
    text = str(error).rstrip(".")
    if auth.denied is not None:
        return ToolFailure(ErrorCode.PERMISSION_DENIED, f"{auth.denied}. {RULE}")
    if text == "interrupted":  # only our progress handler interrupts this connection
        return ToolFailure(ErrorCode.TIMEOUT, f"query stopped after {deadline_s:g} s of work; add a LIMIT or simplify.")
    if "one statement at a time" in text:
        return ToolFailure(ErrorCode.VALIDATION_FAILED, f"one statement only. {RULE}")
    if "because it is a view" in text:  # SQLite refuses DELETE/UPDATE of a trigger-less view itself
        return ToolFailure(ErrorCode.PERMISSION_DENIED, f"{text}. {RULE}")
    if isinstance(error, sqlite3.IntegrityError):  # RAISE(ABORT) in the trigger: a bad value
        return ToolFailure(ErrorCode.VALIDATION_FAILED, f"{text}; nothing was changed.")
    return ToolFailure(ErrorCode.VALIDATION_FAILED, f"SQLite says: {text}. {RULE}")


def run_memory_sql(
    database: Database, user_id: int, sql: str, *, deadline_s: float = 1.0, max_rows: int = 200,
    max_update_rows: int = 50,
) -> MemorySqlOutput:
    """Run one model-written statement against this user's views, on a connection of its own.

    Raises ToolFailure: VALIDATION_FAILED (syntax, several statements, bad values),
    PERMISSION_DENIED (anything outside the allow-list, and an UPDATE matching more than
    `max_update_rows` memories: the cap is a rule, not a syntax problem), TIMEOUT (deadline).
    Nothing is written unless the whole statement succeeds.
    """
    if not isinstance(user_id, int) or isinstance(user_id, bool):
        raise TypeError(f"user_id must be an int, got {type(user_id).__name__}")  # it is formatted into SQL
    if not sql.strip() or "\x00" in sql:
        raise ToolFailure(ErrorCode.VALIDATION_FAILED, f"give one SQL statement (no NUL characters). {RULE}")
    prefix = f"_msql_{secrets.token_hex(8)}"  # unguessable names, see the module docstring
    conn = database.connect()
    try:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        auth = _Authorizer(prefix, _create_views(conn, prefix, user_id))
        stop_at = time.monotonic() + deadline_s
        conn.set_progress_handler(lambda: int(time.monotonic() >= stop_at), PROGRESS_EVERY_OPS)
        try:
            return _execute(conn, auth, sql, user_id, max_rows, max_update_rows)
        except (sqlite3.Error, sqlite3.Warning, UnicodeError, OverflowError) as error:
            raise _failure(error, auth, deadline_s) from None
    finally:
        conn.set_authorizer(None)
        conn.set_progress_handler(None, 0)
        if conn.in_transaction:  # an interrupted write may already have rolled back by itself
            conn.execute("ROLLBACK")
        conn.close()


def _execute(
    conn: sqlite3.Connection, auth: _Authorizer, sql: str, user_id: int, max_rows: int, max_update_rows: int
) -> MemorySqlOutput:
    """Phase 1 (compile only), then phase 2 (run) inside a transaction; the caller rolls back on error."""
    conn.set_authorizer(auth)
    conn.execute("EXPLAIN " + sql).close()  # compiles and authorizes the whole program, runs none of it
    if not (auth.saw_update or auth.saw_select):
        raise ToolFailure(ErrorCode.PERMISSION_DENIED, f"only SELECT or UPDATE memories can run. {RULE}")
    kind: Literal["select", "update"] = "update" if auth.saw_update else "select"
    conn.set_authorizer(None)  # BEGIN is ours; the model's SQL may not open or end transactions
    conn.execute("BEGIN IMMEDIATE" if kind == "update" else "BEGIN")
    conn.set_authorizer(auth)
    cursor = conn.execute(sql)
    columns = [column[0] for column in cursor.description or ()]
    if kind == "update" and columns:  # RETURNING through an INSTEAD OF view reports NULL ids
        raise ToolFailure(ErrorCode.VALIDATION_FAILED, "UPDATE … RETURNING is not supported; SELECT afterwards.")
    fetched = cursor.fetchmany(max_rows + 1) if columns else []
    cursor.close()
    conn.set_authorizer(None)
    updated = 0
    if kind == "update":  # `updated` counts rows the WHERE matched; unchanged rows are not rewritten
        updated = conn.execute(f"SELECT count(*) FROM temp.{auth.pending}").fetchone()[0]
        if updated > max_update_rows:
            raise ToolFailure(
                ErrorCode.PERMISSION_DENIED,
                f"UPDATE would change {updated} > {max_update_rows} memories; narrow the WHERE. Nothing was changed.",
            )
        conn.execute(
            f"""UPDATE main.user_memories SET content = p.content, importance = p.importance, updated_at = ?
            FROM temp.{auth.pending} AS p WHERE user_memories.id = p.id AND user_memories.user_id = ?
            AND (user_memories.content IS NOT p.content OR user_memories.importance IS NOT p.importance)""",
            (utc_now(), user_id),
        )
    conn.set_progress_handler(None, 0)  # a COMMIT is never cut short half-way
    conn.execute("COMMIT")
    rows = [[_stored_cell(value) for value in row] for row in fetched[:max_rows]]
    return MemorySqlOutput(
        kind=kind, columns=columns, rows=rows, row_count=len(rows), truncated=len(fetched) > max_rows, updated=updated
    )


def memory_sql_handler(data: MemorySqlInput, ctx: ToolContext) -> MemorySqlOutput:
    return run_memory_sql(ctx.database, ctx.user_id, data.sql)


MEMORY_SQL_TOOL = Tool(
    name="memory_sql",
    description=(
        "Query this user's own data with SQLite SQL. Views: messages(id, session_id, role, content, created_at) "
        "and memories(id, content, importance, created_at, updated_at). One SELECT (CTEs, joins, aggregates, "
        "window and json functions allowed) or one UPDATE memories SET content=…, importance=… WHERE … "
        "(at most 50 rows, importance 1-10). At most 200 rows returned; 1 second of work per query."
    ),
    input_model=MemorySqlInput,
    output_model=MemorySqlOutput,
    handler=memory_sql_handler,
    result_role="memory_sql_tools",
    command=CommandBinding(
        name="memory_sql",
        usage="/memory_sql <SELECT …> (or put the SQL on the lines after /memory_sql)",
        example="/memory_sql SELECT content, importance FROM memories ORDER BY importance DESC LIMIT 5",
        args_field="sql", body_field="sql", body_fallback_to_args=True,
    ),
)
