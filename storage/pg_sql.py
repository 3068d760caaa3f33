"""The storage layer's SQL, as PostgreSQL reads it: placeholders and SQLite's BEGIN forms.

Statements are written once with `?` placeholders (qmark, as sqlite3 takes them). psycopg
wants `%s`, and reads every other `%` as the start of one. `pg_sql` rewrites a statement by
scanning it: outside string literals, quoted identifiers and comments `?` becomes `%s` and
`%` becomes `%%` (psycopg reads `%` everywhere, literals included, so there too) and a named `:name` becomes `%(name)s` (sqlite3's named style, with a dict
of values); a `::` cast stays a cast. Inside literals and comments nothing else changes, so a `?` or `%` in a literal (a LIKE pattern,
JSON path) stays text. Values are always sent as parameters, never spliced in.

`BEGIN IMMEDIATE` / `DEFERRED` / `EXCLUSIVE` (SQLite's lock modes) become `BEGIN`. What
IMMEDIATE and EXCLUSIVE promise (one writing transaction at a time, so a read-then-write such
as "next attempt number" or a profile's read-modify-write cannot interleave with another) is
kept by `PgConnection`, which takes `WRITE_LOCK` for the transaction (`takes_write_lock`).
"""

from __future__ import annotations

import re
from functools import lru_cache

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BEGIN = re.compile(r"\s*BEGIN\s+(IMMEDIATE|DEFERRED|EXCLUSIVE)\s*(TRANSACTION)?\s*;?\s*", re.IGNORECASE)
_WRITE_BEGIN = re.compile(r"\s*BEGIN\s+(IMMEDIATE|EXCLUSIVE)\s*(TRANSACTION)?\s*;?\s*", re.IGNORECASE)
WRITE_LOCK = 7_461_626_002  # pg_advisory_xact_lock key: "a write transaction of this app"


def takes_write_lock(sql: str) -> bool:
    """SQLite's `BEGIN IMMEDIATE` / `BEGIN EXCLUSIVE`: a transaction that writes, serialised."""
    return _WRITE_BEGIN.fullmatch(sql) is not None


@lru_cache(maxsize=1024)
def pg_sql(sql: str) -> str:
    """`sql` with qmark placeholders rewritten for psycopg (see the module doc)."""
    if _BEGIN.fullmatch(sql):
        return "BEGIN"
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        char = sql[i]
        if char in ("'", '"'):
            end = _closing_quote(sql, i, char)
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(sql[i:end].replace("%", "%%"))
            i = end
        elif sql.startswith("::", i):
            out.append("::")
            i += 2
        elif char == ":" and (name := _NAME.match(sql, i + 1)):
            out.append(f"%({name.group()})s")
            i = name.end()
        elif char == "?":
            out.append("%s")
            i += 1
        elif char == "%":
            out.append("%%")
            i += 1
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _closing_quote(sql: str, start: int, quote: str) -> int:
    """Index just past the literal opened at `start` (a doubled quote is an escaped one)."""
    i = start + 1
    while True:
        found = sql.find(quote, i)
        if found < 0:
            return len(sql)  # unterminated: PostgreSQL will report the syntax error
        if sql.startswith(quote * 2, found):
            i = found + 2
            continue
        return found + 1


def placeholder_count(sql: str) -> int:
    """How many parameters `sql` takes (its `%s` after translation)."""
    return pg_sql(sql).replace("%%", "").count("%s")
