"""`/memory_sql`: read-only SQL over the user's own data, plus `UPDATE memories` (SPEC 6a).

The model's statement never runs in the server process: a SQL worker of the app's worker
pool (`bounded/sql.py`) runs it on a read-only connection, under SQLite's authorizer (the
allow-list of SPEC 6a, `bounded/sql_memory.py`), SQLite's size and heap limits, and a
deadline the server enforces by killing the worker (one slow function call cannot outlive it). The worker sends
back at most `max_rows` rows within a byte budget, cells already cut to size.

An UPDATE comes back as the list of changes it would make (at most `max_update_rows`, else it
is refused); this module applies them in one short write transaction, checking that each
memory still holds the values the statement saw. So the write lock is held only for the
writes themselves whatever the statement's WHERE costs, and nothing is written unless the
whole statement succeeded.

On PostgreSQL (`DATABASE_URL=postgresql://…`) the same rule is PostgreSQL's to enforce: the
statement runs as a restricted login role over per-user views (`storage/pg_memory_run.py`,
`storage/pg_confinement.py`), and an UPDATE's changes come back the same way and are written by
`apply_changes` here. Which engine runs it is the store's (`Store.backend.run_memory_sql`),
chosen when the store was opened.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Literal

from pydantic import Field

from bounded.pool import WorkerPool
from bounded.sql_values import Change, MemoryAnswer, SqlError
from foundation.cancellation import NEVER, CancelToken
from storage.connection import DbConnection, Dialect, Store
from storage.db import transaction, utc_now
from tools.base import (
    Approval,
    CommandBinding,
    ErrorCode,
    Tool,
    ToolContext,
    ToolFailure,
    ToolHints,
    ToolInput,
    ToolOutput,
)

NOT_APPROVED = "this statement changes memories and the user did not approve it; nothing was changed"
RENDERED_CELL_CHARS = 200  # text cells shown in the rendered table
RENDERED_MAX_CHARS = 32_000  # the whole rendered table (SPEC 12: a stored result is at most 64 KiB)
_CODES: dict[str, ErrorCode] = {
    "VALIDATION_FAILED": ErrorCode.VALIDATION_FAILED,
    "PERMISSION_DENIED": ErrorCode.PERMISSION_DENIED,
    "TIMEOUT": ErrorCode.TIMEOUT,
    "TOO_LARGE": ErrorCode.VALIDATION_FAILED,  # the model can fix it: fewer or shorter values, a LIMIT
    "UNAVAILABLE": ErrorCode.INTERNAL_ERROR,
    "BUSY": ErrorCode.BUSY,  # the shared SQL workers had no place in time (SPEC 12: 503 over HTTP)
}


class MemorySqlInput(ToolInput):
    sql: str = Field(
        min_length=1,
        max_length=10_000,
        description=("One SELECT over the views messages and memories, or one UPDATE memories SET content/importance."),
    )


class MemorySqlOutput(ToolOutput):
    kind: Literal["select", "update"]
    columns: list[str]
    rows: list[list[Any]]
    row_count: int
    truncated: bool
    updated: int = 0
    truncated_by: Literal["rows", "bytes", ""] = ""  # the row cap, or the answer's byte budget

    def render(self) -> str:
        """A compact table, one line per row, cells JSON-quoted so newlines stay escaped."""
        lines: list[str] = []
        if self.columns:
            lines.append(" | ".join(self.columns))
            used = len(lines[0])
            for shown, row in enumerate(self.rows):
                line = " | ".join(_render_cell(value) for value in row)
                used += len(line) + 1
                if used > RENDERED_MAX_CHARS:
                    lines.append(f"(… {self.row_count - shown} more rows not shown; select fewer columns or rows)")
                    break
                lines.append(line)
            cap = {
                "rows": f", truncated at {self.row_count}",
                "bytes": ", truncated at the size limit: select fewer or shorter columns",
            }.get(self.truncated_by, "")
            lines.append(f"({self.row_count} row{'' if self.row_count == 1 else 's'}{cap})")
        if self.kind == "update":
            lines.append(f"Updated {self.updated} memor{'y' if self.updated == 1 else 'ies'}.")
        return "\n".join(lines)


def _render_cell(value: Any) -> str:
    text = "NULL" if value is None else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= RENDERED_CELL_CHARS else text[: RENDERED_CELL_CHARS - 1] + "…"


def run_memory_sql(
    database: Store,
    user_id: int,
    sql: str,
    *,
    deadline_s: float = 1.0,
    max_rows: int = 200,
    max_update_rows: int = 50,
    pool: WorkerPool | None = None,
    conn: DbConnection | None = None,
    cancel: CancelToken = NEVER,
    allow_update: bool = True,
) -> MemorySqlOutput:
    """Run one model-written statement against this user's views, on the store's engine;
    an UPDATE is written (or refused) before it returns.

    Raises ToolFailure: VALIDATION_FAILED (syntax, several statements, bad values, values or
    results too large), PERMISSION_DENIED (anything outside the allow-list, and an UPDATE
    matching more than `max_update_rows` memories: the cap is a rule, not a syntax problem),
    TIMEOUT (deadline). With `allow_update` False (a call that runs only because the engine
    said it reads, `statement_writes`), an UPDATE is refused before anything is written.
    """
    if not isinstance(user_id, int) or isinstance(user_id, bool):
        raise TypeError(f"user_id must be an int, got {type(user_id).__name__}")  # it is formatted into SQL
    answer = database.backend.run_memory_sql(
        user_id,
        sql,
        deadline_s=deadline_s,
        max_rows=max_rows,
        max_update_rows=max_update_rows,
        pool=pool,
        cancel=cancel,
    )
    if isinstance(answer, SqlError):
        raise failure_of(answer)
    if answer.kind == "update":
        if not allow_update:
            raise ToolFailure(ErrorCode.PERMISSION_DENIED, NOT_APPROVED)
        if conn is None:
            with database.connection() as own_conn:
                apply_changes(own_conn, user_id, answer.changes)
        else:
            apply_changes(conn, user_id, answer.changes)
    return _output(answer)


def failure_of(error: SqlError) -> ToolFailure:
    """The tool failure the model sees for an engine's `SqlError`."""
    return ToolFailure(_CODES.get(error.code, ErrorCode.INTERNAL_ERROR), error.message)


def apply_changes(conn: DbConnection, user_id: int, changes: list[Change]) -> None:
    """Write an UPDATE's changes in one short transaction, or none of them.

    Each row is written only if it still holds the values the statement saw (another turn
    may have changed it meanwhile); unchanged rows are not rewritten. The same SQL on both
    engines (both columns are NOT NULL, so `=` compares them exactly).
    """
    changed = [c for c in changes if (c.content, c.importance) != (c.old_content, c.old_importance)]
    if not changed:
        return
    now = utc_now()
    with transaction(conn):
        for change in changed:
            cursor = conn.execute(
                """UPDATE user_memories SET content = ?, importance = ?, updated_at = ?
                WHERE id = ? AND user_id = ? AND content = ? AND importance = ?""",
                (change.content, change.importance, now, change.id, user_id, change.old_content, change.old_importance),
            )
            if cursor.rowcount != 1:
                raise ToolFailure(
                    ErrorCode.VALIDATION_FAILED,
                    f"memory {change.id} changed while the UPDATE ran; nothing was changed. Run the UPDATE again.",
                )


def _output(answer: MemoryAnswer) -> MemorySqlOutput:
    return MemorySqlOutput(
        kind=answer.kind,
        columns=answer.columns,
        rows=answer.rows,
        row_count=len(answer.rows),
        truncated=answer.truncated,
        truncated_by=answer.truncated_by,
        updated=len(answer.changes),
    )


def memory_sql_handler(data: MemorySqlInput, ctx: ToolContext) -> MemorySqlOutput:
    with ctx.storage_span("memory_sql"):
        return run_memory_sql(
            ctx.database,
            ctx.user_id,
            data.sql,
            pool=ctx.bounded,
            conn=ctx.conn,
            cancel=ctx.cancel,
            allow_update=ctx.writes_allowed,
        )


def statement_writes(data: MemorySqlInput, ctx: ToolContext) -> bool:
    """Whether the engine that will run the statement reads it as an UPDATE of memories
    (SQLite's authorizer over `EXPLAIN`, PostgreSQL's plan; an UPDATE is tried as far as
    recording its changes, which never writes). A statement the engine refuses, there or in
    that trial, raises the refusal, so the call is refused at once, without asking."""
    answer = ctx.database.backend.run_memory_sql(
        ctx.user_id,
        data.sql,
        deadline_s=1.0,
        max_rows=1,
        max_update_rows=50,
        pool=ctx.bounded,
        cancel=ctx.cancel,
        dry_run=True,
    )
    if isinstance(answer, SqlError):
        raise failure_of(answer)
    return answer.kind == "update"


MEMORY_SQL_TOOL = Tool(
    name="memory_sql",
    annotations=ToolHints(
        destructive=True, idempotent=False, open_world=False
    ),  # served over /mcp: an UPDATE rewrites memories
    description=(
        "Query this user's own data with SQL (SQLite's dialect). Views: messages(id, session_id, role, content, created_at) "
        "and memories(id, content, importance, created_at, updated_at). One SELECT (CTEs, joins, aggregates, "
        "window and json functions allowed) or one UPDATE memories SET content=…, importance=… WHERE … "
        "(at most 50 rows, importance 1-10). At most 200 rows returned; 1 second of work per query."
    ),
    input_model=MemorySqlInput,
    output_model=MemorySqlOutput,
    handler=memory_sql_handler,
    result_role="memory_sql_tools",
    approval=Approval.when("update", statement_writes),  # an UPDATE asks; the engine says which is one
    command=CommandBinding(
        name="memory_sql",
        usage="/memory_sql <SELECT …> (or put the SQL on the lines after /memory_sql)",
        example="/memory_sql SELECT content, importance FROM memories ORDER BY importance DESC LIMIT 5",
        request="What are the five most important things you remember about me?",
        args_field="sql",
        body_field="sql",
        body_fallback_to_args=True,
    ),
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)


ENGINE_NAMES: dict[Dialect, str] = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def memory_sql_tool(dialect: Dialect) -> Tool[MemorySqlInput, MemorySqlOutput]:
    """The tool as the model is told about it: the SQL dialect is the database's own
    (`DATABASE_URL`), so a model on PostgreSQL is not asked for SQLite's functions."""
    description = MEMORY_SQL_TOOL.description.replace("(SQLite's dialect)", f"({ENGINE_NAMES[dialect]}'s dialect)")
    return replace(MEMORY_SQL_TOOL, description=description)
