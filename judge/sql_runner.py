"""Runs inside the judge's python image (shipped in the archive, not imported by the app).

usage: python3 sql_runner.py QUERY_FILE [SETUP_FILE | -]
Opens a fresh in-memory SQLite database, runs SETUP_FILE (`-`: stdin, how the judge passes
each test's setup, so no test's setup is a file another test could read) as a script, then each statement of
QUERY_FILE, and prints one JSON document for the last statement that returned rows:
{"columns": [...], "rows": [[...], ...]}. A failing statement prints {"error": "..."} and
exits 1. The backend parses this document; nothing else is printed on stdout.
"""

import json
import sqlite3
import sys
from collections.abc import Iterator
from typing import Any


def statements(script: str) -> Iterator[str]:
    buffer = ""
    for piece in script.split(";"):
        buffer += piece + ";"
        if sqlite3.complete_statement(buffer):
            if buffer.strip(" \t\r\n;"):
                yield buffer
            buffer = ""
    if buffer.strip(" \t\r\n;"):
        yield buffer


def cell(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    return value


def main(argv: list[str]) -> int:
    with open(argv[1], encoding="utf-8") as handle:
        query = handle.read()
    setup = ""
    if len(argv) > 2 and argv[2] == "-":
        setup = sys.stdin.read()
    elif len(argv) > 2:
        with open(argv[2], encoding="utf-8") as handle:
            setup = handle.read()
    db = sqlite3.connect(":memory:")
    result: dict[str, list[Any]] = {"columns": [], "rows": []}
    try:
        db.executescript(setup)
        for statement in statements(query):
            cursor = db.execute(statement)
            if cursor.description is not None:
                rows = cursor.fetchall()
                result = {
                    "columns": [col[0] for col in cursor.description],
                    "rows": [[cell(v) for v in row] for row in rows],
                }
    except sqlite3.Error as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
