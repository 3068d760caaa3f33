"""How the workspace counts lines: one rule for the file tools and the regex search worker.

A module of its own, with no imports, so that the search worker (`bounded/regex_search.py`,
a process that imports only what its job needs) uses the same rule as `/read_file` and
`/edit_file` without loading the app.
"""

from __future__ import annotations


def text_lines(text: str) -> list[str]:
    """Lines split on `\\n` only (a final newline does not start a new line), `\\r` dropped.

    `str.splitlines` would also break at form feeds and U+2028, so line numbers would
    disagree with editors and with `/edit_file`'s counting.
    """
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]
