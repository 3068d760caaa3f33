"""`/search_files`' matching, run in a search worker (`kinds.SEARCH`: imports only `regex`).

Both halves of a regex's cost happen here, inside the child's memory budget and deadline:
compiling (the `regex` package expands a counted repetition into copies of its body, so
`(?:(?:x{999}){999}){9}` asks for gigabytes at compile time) and matching (backtracking,
also bounded per line by the engine's own `timeout`, which names the line that hung). The
compiled pattern lives only as long as this job: nothing is cached in the server, and the
`regex` module's cache is not used (`cache_pattern=False`), so a reused worker keeps none either.

Input frames: one per text file, `path NUL text` (UTF-8). Answer: `{"matches": [[path, line,
text]], "truncated", "files_searched"}` or `{"error": "invalid" | "line_timeout", ...}`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import regex

from foundation.text_lines import text_lines


def search(args: dict[str, Any], frames: Iterator[bytes]) -> dict[str, Any]:
    max_matches, line_chars = int(args["max_matches"]), int(args["line_chars"])
    line_timeout_s = float(args["line_timeout_s"])
    try:
        compiled = regex.compile(args["pattern"], cache_pattern=False)
    except regex.error as error:
        return {"error": "invalid", "detail": str(error)}
    except OverflowError as error:
        return {"error": "invalid", "detail": f"a repetition count is too large ({error})"}
    matches: list[list[Any]] = []
    searched = 0
    for frame in frames:
        raw_path, _, data = frame.partition(b"\0")
        path, text = raw_path.decode("utf-8"), data.decode("utf-8")
        searched += 1
        for number, line in enumerate(text_lines(text), start=1):
            try:
                hit = compiled.search(line, timeout=line_timeout_s)
            except TimeoutError:
                return {"error": "line_timeout", "path": path, "line": number}
            if hit is not None:
                matches.append([path, number, line[:line_chars]])
                if len(matches) > max_matches:
                    return {"matches": matches[:max_matches], "truncated": True, "files_searched": searched}
    return {"matches": matches, "truncated": False, "files_searched": searched}
