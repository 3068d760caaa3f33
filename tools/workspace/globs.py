"""File globs for `/list_files` and `/search_files`, matched against relative paths.

Matching is done on the path text of files found by `fs.walk_workspace` (which never
follows links), so a glob can never reach outside the workspace; nothing here touches
the filesystem. The rules, chosen to do what a model typing a shell glob expects:

* no wildcard (`*`, `?`, `[`): a path prefix. `notes` matches the file `notes` and every
  file below the directory `notes/`; `notes/a.txt` matches that one file.
* wildcards but no `/`: matched against the file NAME at any depth, so `*.py` finds every
  Python file (like `find -name`).
* wildcards and a `/`: matched against the whole relative path, one component at a time;
  `*`, `?` and `[...]` stay within one component, `**` as a whole component matches zero
  or more directories (`src/**/*.py`). A trailing `/` means "everything below".

Matching is case-sensitive. Globs obey the path rules of `paths.py`: no `..`, no
absolute paths, no backslashes, no control characters.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fnmatch import fnmatchcase
from functools import cache

from tools.base import ErrorCode, ToolFailure

MAX_GLOB_CHARS = 200
MAX_DOUBLE_STARS = 4
_WILDCARDS = re.compile(r"[*?\[]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _invalid(message: str) -> ToolFailure:
    return ToolFailure(ErrorCode.VALIDATION_FAILED, message)


def _match_components(patterns: tuple[str, ...], parts: tuple[str, ...]) -> bool:
    @cache
    def match(p: int, q: int) -> bool:
        if p == len(patterns):
            return q == len(parts)
        if patterns[p] == "**":
            return any(match(p + 1, start) for start in range(q, len(parts) + 1))
        return q < len(parts) and fnmatchcase(parts[q], patterns[p]) and match(p + 1, q + 1)

    return match(0, 0)


def compile_glob(glob: str | None) -> Callable[[str], bool]:
    """A predicate on relative POSIX paths; None or empty matches every file."""
    if glob is None or not glob.strip():
        return lambda path: True
    glob = glob.strip()
    if len(glob) > MAX_GLOB_CHARS:
        raise _invalid(f"the glob is {len(glob)} characters long; use at most {MAX_GLOB_CHARS}.")
    if _CONTROL.search(glob):
        raise _invalid("the glob contains a NUL or control character; use plain printable characters.")
    if "\\" in glob:
        raise _invalid("the glob contains a backslash; use forward slashes, e.g. src/*.py.")
    if glob.startswith("/"):
        raise ToolFailure(
            ErrorCode.PERMISSION_DENIED,
            "absolute globs are not allowed; globs are relative to your workspace, e.g. notes/*.md.",
        )
    while glob.startswith("./"):
        glob = glob[2:]
    components = tuple(part for part in glob.split("/") if part not in ("", "."))
    if ".." in components:
        raise ToolFailure(
            ErrorCode.PERMISSION_DENIED, "'..' is not allowed in globs; the workspace is the whole search space."
        )
    if not components:
        return lambda path: True
    if components.count("**") > MAX_DOUBLE_STARS:
        raise _invalid(f"the glob has more than {MAX_DOUBLE_STARS} '**' components; use fewer.")
    if not _WILDCARDS.search(glob):
        prefix = "/".join(components)
        return lambda path: path == prefix or path.startswith(prefix + "/")
    if "/" not in glob:
        name_pattern = components[0]
        return lambda path: fnmatchcase(path.rsplit("/", 1)[-1], name_pattern)
    if glob.endswith("/"):
        components = (*components, "**")
    return lambda path: _match_components(components, tuple(path.split("/")))
