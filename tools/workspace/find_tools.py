"""`/list_files [glob]` and `/search_files <regex> [file_glob]` over the user's workspace.

Both walk the workspace with `fs.walk_workspace` (no link is ever followed; links and
special files are listed as skipped) and filter with `globs.compile_glob`.

The first line of `/search_files` is one string, so the optional glob is split off by a
fixed rule (`split_trailing_glob`): the LAST whitespace-separated token is the file glob
when there are at least two tokens and that token
  * contains `*` or `?`,
  * consists only of letters, digits and `_ - . / * ? [ ]`,
  * starts with `*` or contains `.` or `/` (so `[a-z]*` or `a*` stay regex), and
  * does not contain `.*` or `.?` (regex idioms: `foo .*bar` stays one regex).
So `/search_files def main *.py` searches `def main` in Python files. To keep such a token
in the regex, wrap the regex in parentheses: `/search_files (TODO *.py)`.

Regexes use the `regex` package with a per-call `timeout`, bounded by the tool deadline
(`ctx.remaining`), so a catastrophic pattern such as `(a+)+$` ends with a TIMEOUT error
instead of hanging a worker. The engine checks its clock periodically, so a timeout can
overshoot by a fraction of itself; the bound is a few seconds, never unbounded.
"""

from __future__ import annotations

import re
from typing import Any

import regex
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.base import CommandBinding, ErrorCode, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput
from tools.workspace.fs import MAX_FILES, MAX_TOTAL_BYTES, decode_text, read_bytes, text_lines, walk_workspace
from tools.workspace.globs import compile_glob
from tools.workspace.paths import SafePath, workspace_root

MAX_LIST_ENTRIES = 200
MAX_MATCHES = 100
MAX_MATCH_LINE_CHARS = 300
MAX_PATTERN_CHARS = 1_000
REGEX_TIMEOUT_S = 1.0  # one regex call (one line); the whole search is bounded by the tool deadline
_GLOB_TOKEN = re.compile(r"^[\w\-./\[\]*?]+$")


class FileInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    size: int


class ListFilesInput(ToolInput):
    glob: str | None = Field(default=None, description="Optional glob, e.g. *.py, notes/**, src/*.js (default: all files).")


class ListFilesOutput(ToolOutput):
    glob: str | None
    files: list[FileInfo]
    total_matches: int
    skipped: list[str]
    workspace_files: int
    workspace_bytes: int

    def render(self) -> str:
        if not self.files:
            if self.workspace_files == 0:
                return "The workspace is empty. Create a file with /write_file <path>."
            return f"No files match {self.glob!r} ({self.workspace_files} files in the workspace; try /list_files with no glob)."
        which = f" matching {self.glob!r}" if self.glob else ""
        lines = [
            f"{self.total_matches} files{which} (workspace: {self.workspace_files}/{MAX_FILES} files, "
            f"{self.workspace_bytes}/{MAX_TOTAL_BYTES} bytes):"
        ]
        lines += [f"{entry.path}  ({entry.size} bytes)" for entry in self.files]
        if self.total_matches > len(self.files):
            lines.append(f"[... {self.total_matches - len(self.files)} more not shown; narrow the glob]")
        if self.skipped:
            lines.append("Skipped (links and special files are never followed): " + ", ".join(self.skipped[:20]))
        return "\n".join(lines)


def list_files(data: ListFilesInput, ctx: ToolContext) -> ListFilesOutput:
    matches = compile_glob(data.glob)
    walk = walk_workspace(workspace_root(ctx.settings, ctx.user_id), ctx.remaining)
    found = [entry for entry in walk.files if matches(entry.path)]
    return ListFilesOutput(
        glob=data.glob or None,
        files=[FileInfo(path=entry.path, size=entry.size) for entry in found[:MAX_LIST_ENTRIES]],
        total_matches=len(found),
        skipped=[path for path in walk.skipped if matches(path)],
        workspace_files=len(walk.files),
        workspace_bytes=walk.total_bytes,
    )


def split_trailing_glob(text: str) -> tuple[str, str | None]:
    """(regex, glob or None) by the rule in this module's docstring."""
    head, _, last = text.strip().rpartition(" ")
    head = head.rstrip()
    if not head or not last:
        return text.strip(), None
    looks_like_glob = (
        ("*" in last or "?" in last)
        and _GLOB_TOKEN.match(last) is not None
        and (last.startswith("*") or "." in last or "/" in last)
        and ".*" not in last
        and ".?" not in last
    )
    return (head, last) if looks_like_glob else (text.strip(), None)


class SearchFilesInput(ToolInput):
    model_config = ConfigDict(str_strip_whitespace=False)  # spaces can be part of a regex

    pattern: str = Field(min_length=1, max_length=MAX_PATTERN_CHARS, description="Regular expression, searched line by line.")
    file_glob: str | None = Field(default=None, description="Optional glob of files to search, e.g. *.py.")

    @model_validator(mode="before")
    @classmethod
    def split_glob(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("pattern"), str) and data.get("file_glob") is None:
            pattern, glob = split_trailing_glob(data["pattern"].replace("\t", " "))
            if glob is not None:
                data = {**data, "pattern": pattern, "file_glob": glob}
        return data


class SearchMatch(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    line: int
    text: str


class SearchFilesOutput(ToolOutput):
    pattern: str
    file_glob: str | None
    matches: list[SearchMatch]
    truncated: bool
    files_searched: int
    binary_skipped: int
    skipped: list[str]

    def render(self) -> str:
        where = f" in files matching {self.file_glob!r}" if self.file_glob else ""
        if not self.matches:
            head = f"No matches for /{self.pattern}/{where} ({self.files_searched} text files searched)."
        else:
            more = f" (first {MAX_MATCHES} shown; make the regex or glob narrower)" if self.truncated else ""
            head = f"{len(self.matches)} matches for /{self.pattern}/{where}{more}:"
        lines = [head, *(f"{m.path}:{m.line}: {m.text}" for m in self.matches)]
        if self.binary_skipped:
            lines.append(f"{self.binary_skipped} binary files not searched.")
        if self.skipped:
            lines.append("Skipped (links, special or unreadable files): " + ", ".join(self.skipped[:20]))
        return "\n".join(lines)


def _compile(pattern: str) -> Any:
    try:
        return regex.compile(pattern)
    except regex.error as error:
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED,
            f"invalid regex {pattern!r}: {error}. Fix the pattern (escape special characters such as ( [ . * + ? with a backslash).",
        ) from None


def search_files(data: SearchFilesInput, ctx: ToolContext) -> SearchFilesOutput:
    compiled = _compile(data.pattern)
    matches_glob = compile_glob(data.file_glob)
    root = workspace_root(ctx.settings, ctx.user_id)
    walk = walk_workspace(root, ctx.remaining)
    found: list[SearchMatch] = []
    skipped = [path for path in walk.skipped if matches_glob(path)]
    searched = binary = 0
    for entry in walk.files:
        if not matches_glob(entry.path) or len(found) > MAX_MATCHES:
            continue
        ctx.remaining()
        try:
            text = decode_text(read_bytes(SafePath(root, tuple(entry.path.split("/")))))
        except ToolFailure:  # swapped for a link, removed or grown since the walk: never followed
            skipped.append(entry.path)
            continue
        if text is None:
            binary += 1
            continue
        searched += 1
        for number, line in enumerate(text_lines(text), start=1):
            try:
                hit = compiled.search(line, timeout=ctx.remaining(REGEX_TIMEOUT_S))
            except TimeoutError:
                raise ToolFailure(
                    ErrorCode.TIMEOUT,
                    f"the regex took too long on {entry.path}:{number} (catastrophic backtracking); simplify it, "
                    "e.g. avoid nested quantifiers like (a+)+, and try again.",
                ) from None
            if hit is not None:
                found.append(SearchMatch(path=entry.path, line=number, text=line[:MAX_MATCH_LINE_CHARS]))
                if len(found) > MAX_MATCHES:
                    break
    return SearchFilesOutput(
        pattern=data.pattern, file_glob=data.file_glob, matches=found[:MAX_MATCHES], truncated=len(found) > MAX_MATCHES,
        files_searched=searched, binary_skipped=binary, skipped=sorted(skipped),
    )


LIST_FILES_TOOL = Tool(
    name="list_files",
    description="List the files of your workspace (relative paths and sizes), optionally filtered by a glob.",
    input_model=ListFilesInput,
    output_model=ListFilesOutput,
    handler=list_files,
    result_role="file_tools",
    command=CommandBinding(name="list_files", usage="/list_files [glob]", example="/list_files *.py", args_field="glob"),
    timeout_s=10.0,
)

SEARCH_FILES_TOOL = Tool(
    name="search_files",
    description="Search the text files of your workspace with a regular expression; shows file:line: text.",
    input_model=SearchFilesInput,
    output_model=SearchFilesOutput,
    handler=search_files,
    result_role="file_tools",
    command=CommandBinding(
        name="search_files", usage="/search_files <regex> [file_glob]", example="/search_files def main *.py",
        args_field="pattern",
    ),
    timeout_s=15.0,
)
