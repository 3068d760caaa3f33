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

Regexes use the `regex` package, but never in the server process: compiling a pattern can
cost gigabytes (`regex` expands counted repetitions, so `(?:(?:x{999}){999}){9}` is 2.6 GB
and 11 s of compiling) and matching can backtrack for ever. So the pattern is compiled and
run in a search worker of the app's worker pool (`bounded/regex_search.py`, `kinds.SEARCH`)
with `SEARCH_MEMORY_MB` of address space and `SEARCH_WALL_S` (at most the tool's deadline,
waiting for a free worker included), killed past either; the files are streamed to it one
at a time. Inside, each line also has the engine's own
`timeout`, so a catastrophic pattern such as `(a|a)+$` ends with a TIMEOUT error naming the
line. Nothing compiled is cached between calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bounded.jobs import Done, Failure, Job, JobFailed, Limits
from bounded.kinds import SEARCH
from bounded.pool import pool_or_own
from foundation.cancellation import Cancelled
from tools.base import READ_ONLY_LOCAL, CommandBinding, ErrorCode, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput
from tools.workspace.fs import MAX_FILES, MAX_TOTAL_BYTES, decode_text, read_bytes, walk_workspace
from tools.workspace.globs import compile_glob
from tools.workspace.paths import SafePath, workspace_root

MAX_LIST_ENTRIES = 200
MAX_MATCHES = 100
MAX_MATCH_LINE_CHARS = 300
MAX_PATTERN_CHARS = 1_000
REGEX_TIMEOUT_S = 1.0  # one regex call (one line), inside the worker
SEARCH_WALL_S = 10.0  # the worker's deadline: compiling and every file (also at most the tool's deadline)
SEARCH_MEMORY_MB = SEARCH.memory_mb  # address space compiling and matching may add in the worker
SEARCH_ANSWER_BYTES = 512 * 1024  # MAX_MATCHES lines of MAX_MATCH_LINE_CHARS, JSON-escaped, fit
_GLOB_TOKEN = re.compile(r"^[\w\-./\[\]*?]+$")


class FileInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    path: str
    size: int


class ListFilesInput(ToolInput):
    glob: str | None = Field(
        default=None, description="Optional glob, e.g. *.py, notes/**, src/*.js (default: all files)."
    )


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


def list_files(data: ListFilesInput, ctx: ToolContext, *, max_entries: int = MAX_LIST_ENTRIES) -> ListFilesOutput:
    """The workspace's files matching the glob, at most `max_entries` of them shown (all counted)."""
    matches = compile_glob(data.glob)
    walk = walk_workspace(workspace_root(ctx.settings, ctx.user_id), ctx.remaining)
    found = [entry for entry in walk.files if matches(entry.path)]
    return ListFilesOutput(
        glob=data.glob or None,
        files=[FileInfo(path=entry.path, size=entry.size) for entry in found[:max_entries]],
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

    pattern: str = Field(
        min_length=1, max_length=MAX_PATTERN_CHARS, description="Regular expression, searched line by line."
    )
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


def _invalid(pattern: str, detail: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.VALIDATION_FAILED,
        f"invalid regex {pattern!r}: {detail}. Fix the pattern (escape special characters such as ( [ . * + ? with a backslash).",
    )


@dataclass
class _Tally:
    """What the parent learned while streaming files to the worker (one search's own)."""

    binary: int = 0
    skipped: list[str] = field(default_factory=list)


def _text_frames(root: Path, paths: list[str], tally: _Tally, check_time: Callable[[], object]) -> Iterator[bytes]:
    """`path NUL text` for each text file, read one at a time as the worker asks for more."""
    for path in paths:
        check_time()
        try:
            text = decode_text(read_bytes(SafePath(root, tuple(path.split("/")))))
        except ToolFailure:  # swapped for a link, removed or grown since the walk: never followed
            tally.skipped.append(path)
            continue
        if text is None:
            tally.binary += 1
            continue
        yield path.encode() + b"\0" + text.encode()


def _failure(pattern: str, failed: JobFailed, wall_s: float) -> Exception:
    kind = failed.kind
    if failed.busy:
        return ToolFailure(
            ErrorCode.BUSY,
            f"the server is busy with other work: {failed.waited_s:.0f} of the {wall_s:.0f} s for this search went waiting "
            "for a free worker; try again in a moment.",
        )
    if kind is Failure.CANCELLED:
        return Cancelled()
    if kind is Failure.MEMORY:
        return ToolFailure(
            ErrorCode.VALIDATION_FAILED,
            f"the regex {pattern[:100]!r} is too complex: compiling or running it needs more than {SEARCH_MEMORY_MB} MB "
            "(large or nested counted repetitions such as (x{999}){999} are expanded in memory). Simplify it and try again.",
        )
    if kind is Failure.TIMEOUT:
        return ToolFailure(
            ErrorCode.TIMEOUT,
            f"the search took longer than {wall_s:.0f} s; make the regex simpler or the file glob narrower and try again.",
        )
    return ToolFailure(ErrorCode.INTERNAL_ERROR, "the search failed unexpectedly; try a simpler regex.")


def search_files(data: SearchFilesInput, ctx: ToolContext) -> SearchFilesOutput:
    matches_glob = compile_glob(data.file_glob)
    root = workspace_root(ctx.settings, ctx.user_id)
    walk = walk_workspace(root, ctx.remaining)
    tally = _Tally(skipped=[path for path in walk.skipped if matches_glob(path)])
    paths = [entry.path for entry in walk.files if matches_glob(entry.path)]
    wall_s = ctx.remaining(SEARCH_WALL_S)
    job = Job(
        "bounded.regex_search:search",
        {
            "pattern": data.pattern,
            "max_matches": MAX_MATCHES,
            "line_chars": MAX_MATCH_LINE_CHARS,
            "line_timeout_s": min(REGEX_TIMEOUT_S, wall_s),
        },
        _text_frames(root, paths, tally, ctx.remaining),
    )
    with pool_or_own(ctx.bounded) as pool:
        outcome = pool.run(
            SEARCH, job, Limits(wall_s=wall_s, output_bytes=SEARCH_ANSWER_BYTES), ctx.cancel, user=ctx.user_id
        )
    if not isinstance(outcome, Done):
        raise _failure(data.pattern, outcome, wall_s)
    answer: dict[str, Any] = outcome.value
    if answer.get("error") == "invalid":
        raise _invalid(data.pattern, str(answer.get("detail", ""))[:300])
    if answer.get("error") == "line_timeout":
        raise ToolFailure(
            ErrorCode.TIMEOUT,
            f"the regex took too long on {answer.get('path')}:{answer.get('line')} (catastrophic backtracking); simplify it, "
            "e.g. avoid nested quantifiers like (a+)+, and try again.",
        )
    found = [SearchMatch(path=path, line=line, text=text) for path, line, text in answer["matches"]]
    return SearchFilesOutput(
        pattern=data.pattern,
        file_glob=data.file_glob,
        matches=found[:MAX_MATCHES],
        truncated=bool(answer["truncated"]),
        files_searched=int(answer["files_searched"]),
        binary_skipped=tally.binary,
        skipped=sorted(tally.skipped),
    )


LIST_FILES_TOOL = Tool(
    name="list_files",
    annotations=READ_ONLY_LOCAL,  # served over /mcp
    description="List the files of your workspace (relative paths and sizes), optionally filtered by a glob.",
    input_model=ListFilesInput,
    output_model=ListFilesOutput,
    handler=list_files,
    result_role="file_tools",
    command=CommandBinding(
        name="list_files",
        usage="/list_files [glob]",
        example="/list_files *.py",
        args_field="glob",
        request="Which Python files are in my workspace?",
    ),
    timeout_s=10.0,
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)

SEARCH_FILES_TOOL = Tool(
    name="search_files",
    annotations=READ_ONLY_LOCAL,  # served over /mcp
    description="Search the text files of your workspace with a regular expression; shows file:line: text.",
    input_model=SearchFilesInput,
    output_model=SearchFilesOutput,
    handler=search_files,
    result_role="file_tools",
    command=CommandBinding(
        name="search_files",
        usage="/search_files <regex> [file_glob]",
        example="/search_files def main *.py",
        args_field="pattern",
    ),
    timeout_s=15.0,
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)
