"""Rows to JSON-safe cells, fetched one at a time within a byte budget.

A result is never gathered whole and cut afterwards: each row is converted as soon as it is
fetched and counted against the budget (its JSON size), so the worker holds at most one raw
row and the answer is bounded before it leaves the worker. Two policies:

- `preview` (`/memory_sql`): long text is cut, blobs shown as a short hex literal; past the
  row cap or the byte budget the rows stop and the answer says it was truncated.
- `exact` (task checks): values are kept whole (blobs as full hex, as the expected rows are
  written); past the row cap or the budget the answer is an error, since a partial result
  cannot be graded.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

BLOB_PREVIEW_BYTES = 64


@dataclass(frozen=True)
class Fetched:
    rows: list[list[Any]]
    truncated_by: Literal["rows", "bytes", ""]


class OverBudget(Exception):
    """An exact result is larger than the caller may receive (`reason`: rows or bytes)."""

    def __init__(self, reason: Literal["rows", "bytes"]) -> None:
        super().__init__(reason)
        self.reason = reason


def cell_size(value: Any) -> int:
    """Bytes the cell takes in the JSON answer (escapes included), plus a separator."""
    if value is None or isinstance(value, (int, float)):
        return 24
    return len(json.dumps(value, ensure_ascii=False)) + 1


def preview_cell(value: Any, text_chars: int) -> Any:
    """Make a cell JSON-safe and short: blobs become a hex literal, long text is cut."""
    if isinstance(value, bytes):
        shown = value[:BLOB_PREVIEW_BYTES].hex()
        return f"x'{shown}'" + ("…" if len(value) > BLOB_PREVIEW_BYTES else "")
    if isinstance(value, str) and len(value) > text_chars:
        return value[:text_chars] + f"…[+{len(value) - text_chars} chars]"
    return value


def exact_cell(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else value


def fetch_preview(cursor: sqlite3.Cursor, max_rows: int, budget_bytes: int, text_chars: int) -> Fetched:
    """At most `max_rows` rows and about `budget_bytes` of cells (the first row is cut to fit)."""
    rows: list[list[Any]] = []
    used = 0
    while True:
        raw = cursor.fetchone()
        if raw is None:
            return Fetched(rows, "")
        if len(rows) >= max_rows:
            return Fetched(rows, "rows")
        row: list[Any] = []
        for value in raw:
            cell = preview_cell(value, text_chars)
            used += cell_size(cell)
            if used > budget_bytes:
                if not rows:  # even one row is too wide: keep what fits, mark the rest
                    rows.append(row + ["…"] * (len(raw) - len(row)))
                return Fetched(rows, "bytes")
            row.append(cell)
        rows.append(row)


def fetch_exact(cursor: sqlite3.Cursor, max_rows: int, budget_bytes: int) -> list[list[Any]]:
    """Every row, whole; raises OverBudget past `max_rows` rows or `budget_bytes` bytes."""
    rows: list[list[Any]] = []
    used = 0
    while True:
        raw = cursor.fetchone()
        if raw is None:
            return rows
        if len(rows) >= max_rows:
            raise OverBudget("rows")
        row = [exact_cell(value) for value in raw]
        used += sum(cell_size(cell) for cell in row)
        if used > budget_bytes:
            raise OverBudget("bytes")
        rows.append(row)
