"""The five workspace tools through `run_tool`, then one `/chat` turn per tool end to end."""

from __future__ import annotations

import dataclasses
import functools
import resource
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from bounded.jobs import Job, Kind, Limits
from bounded.kinds import SEARCH
from bounded.pool import WorkerPool
from foundation.cancellation import CancelToken
from testing.waiting import ReapedCpu, wait_until
from tests.workspace_support import TOOLS, Workspaces
from tools.base import ToolFailure
from tools.runner import run_tool
from tools.workspace import find_tools, fs
from tools.workspace.find_tools import MAX_MATCHES, split_trailing_glob

HOLD = Kind("test", ("tests.bounded_jobs",), memory_mb=64, site_packages=False)  # other work holding a worker


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspaces]:
    world = Workspaces(tmp_path)
    yield world
    world.close()


def block(search: str, replace: str) -> str:
    return f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"


# write / read ------------------------------------------------------------------------------


def test_write_creates_parents_then_replaces(ws: Workspaces) -> None:
    first = ws.ok("write_file", path="notes/deep/a.txt", content="one\ntwo\n")
    assert first.output == {"path": "notes/deep/a.txt", "bytes": 8, "lines": 2, "created": True}
    assert first.text == "Created notes/deep/a.txt (8 bytes, 2 lines)."
    second = ws.ok("write_file", path="./notes//deep/a.txt", content="  three  ")
    assert second.output["created"] is False and second.text.startswith("Replaced notes/deep/a.txt")
    assert (ws.root() / "notes/deep/a.txt").read_bytes() == b"  three  "  # content is not stripped
    assert [p.name for p in (ws.root() / "notes/deep").iterdir()] == ["a.txt"]  # no temp file left


def test_write_needs_content(ws: Workspaces) -> None:
    assert "content" in ws.fail("write_file", "VALIDATION_FAILED", path="a.txt")
    ws.fail("write_file", "VALIDATION_FAILED", path="a.txt", content="")
    ws.fail("write_file", "VALIDATION_FAILED", path="a.txt", content="bad\x00byte")
    assert not (ws.root() / "a.txt").exists()


def test_write_onto_a_directory_is_refused(ws: Workspaces) -> None:
    (ws.root() / "dir").mkdir()
    assert "directory" in ws.fail("write_file", "VALIDATION_FAILED", path="dir", content="x")


def test_read_shows_numbered_lines(ws: Workspaces) -> None:
    ws.ok("write_file", path="a.py", content="def main():\n    return 1\n")
    result = ws.ok("read_file", path="a.py")
    assert result.text.split("\n") == [
        "a.py (2 lines, 25 bytes), lines 1-2:",
        "    1  def main():",
        "    2      return 1",
    ]
    assert result.output["content"] == "def main():\n    return 1"


def test_read_missing_and_directory(ws: Workspaces) -> None:
    assert "/list_files" in ws.fail("read_file", "NOT_FOUND", path="nope.txt")
    ws.fail("read_file", "NOT_FOUND", path="no/such/dir.txt")
    (ws.root() / "dir").mkdir()
    ws.fail("read_file", "VALIDATION_FAILED", path="dir")


def test_read_window_is_capped_and_says_how_to_continue(ws: Workspaces) -> None:
    ws.ok("write_file", path="big.log", content="".join(f"line {n}\n" for n in range(1, 1001)))
    first = ws.ok("read_file", path="big.log")
    assert first.output["end_line"] == 400 and first.output["truncated"] is True
    assert "read on with /read_file big.log 401-800" in first.text
    window = ws.ok("read_file", path="big.log 401-410")  # the command-line form of a range
    assert window.output["start_line"] == 401 and window.output["end_line"] == 410
    assert window.text.split("\n")[1] == "  401  line 401"
    tail = ws.ok("read_file", path="big.log", start_line=990)
    assert tail.output["end_line"] == 1000 and tail.output["truncated"] is False
    ws.fail("read_file", "VALIDATION_FAILED", path="big.log", start_line=2000)


def test_empty_file_reads_as_empty(ws: Workspaces) -> None:
    (ws.root() / "empty.txt").write_bytes(b"")
    assert ws.ok("read_file", path="empty.txt").text == "empty.txt: empty file (0 bytes)."


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00\x00", b"caf\xe9 latin-1", b"text\x00with nul"])
def test_binary_files_are_reported_not_dumped(ws: Workspaces, data: bytes) -> None:
    (ws.root() / "blob.bin").write_bytes(data)
    result = ws.ok("read_file", path="blob.bin")
    assert result.text == f"blob.bin: binary file, {len(data)} bytes (not shown)."
    assert result.output["binary"] is True and result.output["content"] == ""
    ws.fail("edit_file", "VALIDATION_FAILED", path="blob.bin", edits=block("caf", "x"))
    found = ws.ok("search_files", pattern="caf|text|PNG").output
    assert found["matches"] == [] and found["binary_skipped"] == 1


# caps --------------------------------------------------------------------------------------


def test_file_size_cap(ws: Workspaces) -> None:
    message = ws.fail("write_file", "VALIDATION_FAILED", path="big.txt", content="x" * (fs.MAX_FILE_BYTES + 1))
    assert str(fs.MAX_FILE_BYTES) in message
    ws.ok("write_file", path="big.txt", content="x" * fs.MAX_FILE_BYTES)
    (ws.root() / "huge.txt").write_bytes(b"x" * (fs.MAX_FILE_BYTES + 1))
    ws.fail("read_file", "VALIDATION_FAILED", path="huge.txt")


def test_file_count_cap(ws: Workspaces) -> None:
    """At the real cap: the workspace is filled on disk, the tool refuses one file more."""
    ws.root().mkdir(parents=True, exist_ok=True)
    for n in range(fs.MAX_FILES - 1):
        (ws.root() / f"f{n}.txt").write_text("x")
    ws.ok("write_file", path="last.txt", content="x")
    limit = f"{fs.MAX_FILES} files (limit {fs.MAX_FILES})"
    assert limit in ws.fail("write_file", "PERMISSION_DENIED", path="one-more.txt", content="x")
    ws.ok("write_file", path="f0.txt", content="replacing is fine")


def test_total_bytes_cap(ws: Workspaces) -> None:
    """At the real cap: files written on disk bring the workspace to it exactly."""
    ws.root().mkdir(parents=True, exist_ok=True)
    size = fs.MAX_FILE_BYTES
    full, rest = divmod(fs.MAX_TOTAL_BYTES - 60, size)
    for n in range(full):
        (ws.root() / f"big{n}.txt").write_bytes(b"x" * size)
    (ws.root() / "rest.txt").write_bytes(b"x" * rest)
    ws.ok("write_file", path="a.txt", content="x" * 60)  # the workspace is now at the cap
    ws.fail("write_file", "PERMISSION_DENIED", path="b.txt", content="x")
    ws.ok("write_file", path="a.txt", content="y" * 60)  # replacing frees the old size
    ws.fail("edit_file", "PERMISSION_DENIED", path="a.txt", edits=block("y" * 60, "z" * 61))
    assert (ws.root() / "a.txt").read_text() == "y" * 60


def test_the_caps_are_arguments_of_the_quota_check(ws: Workspaces) -> None:
    ws.ok("write_file", path="a.txt", content="x" * 60)
    walk = fs.walk_workspace(ws.root())
    fs.check_quota(walk, "a.txt", 100, max_files=1, max_bytes=100)  # replacing the one file within both caps
    with pytest.raises(ToolFailure, match=r"1 files \(limit 1\)"):
        fs.check_quota(walk, "b.txt", 1, max_files=1, max_bytes=100)
    with pytest.raises(ToolFailure, match=r"101 bytes \(limit 100\)"):
        fs.check_quota(walk, "b.txt", 41, max_files=2, max_bytes=100)


# edit blocks -------------------------------------------------------------------------------

SOURCE = "def a():\n    return 1\n\n\ndef b():\n    return 1\n"


def test_edit_applies_several_blocks_in_order(ws: Workspaces) -> None:
    ws.ok("write_file", path="m.py", content=SOURCE)
    edits = "\n\n".join(
        [
            block("def a():\n    return 1", "def a():\n    return 2"),
            block("return 2", "return 20"),
            block("def b():\n    return 1", "def b():\n    return 3"),
        ]
    )
    result = ws.ok("edit_file", path="m.py", edits=edits)
    assert result.output["blocks"] == 3
    assert (ws.root() / "m.py").read_text() == "def a():\n    return 20\n\n\ndef b():\n    return 3\n"


def test_edit_deleting_whole_lines_removes_their_line_breaks(ws: Workspaces) -> None:
    ws.ok("write_file", path="t.txt", content="keep\ndrop me\nkeep too\n")
    ws.ok("edit_file", path="t.txt", edits=block("drop me", ""))
    assert (ws.root() / "t.txt").read_text() == "keep\nkeep too\n"


def test_edit_keeps_crlf_line_endings(ws: Workspaces) -> None:
    (ws.root() / "w.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    ws.ok("edit_file", path="w.txt", edits=block("one\ntwo", "1\n2"))
    assert (ws.root() / "w.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


def assert_unchanged(ws: Workspaces, path: str, content: str) -> None:
    assert (ws.root() / path).read_text() == content
    assert sorted(p.name for p in ws.root().iterdir()) == [path]


def test_edit_zero_matches_writes_nothing(ws: Workspaces) -> None:
    ws.ok("write_file", path="m.py", content=SOURCE)
    edits = block("def a():", "def alpha():") + "\n" + block("def c():", "def gamma():")
    message = ws.fail("edit_file", "VALIDATION_FAILED", path="m.py", edits=edits)
    assert message.startswith("edit block 2 of 2: the SEARCH text matches 0 times in m.py (after applying blocks 1-1)")
    assert "Nothing was written" in message and "/read_file m.py" in message
    assert_unchanged(ws, "m.py", SOURCE)


def test_edit_zero_matches_hints_at_whitespace(ws: Workspaces) -> None:
    ws.ok("write_file", path="m.py", content=SOURCE)
    message = ws.fail("edit_file", "VALIDATION_FAILED", path="m.py", edits=block("def a():\nreturn 1", "x"))
    assert "indentation" in message


def test_edit_multiple_matches_writes_nothing(ws: Workspaces) -> None:
    ws.ok("write_file", path="m.py", content=SOURCE)
    message = ws.fail("edit_file", "VALIDATION_FAILED", path="m.py", edits=block("    return 1", "    return 9"))
    assert "edit block 1 of 1: the SEARCH text matches 2 times in m.py (at lines 2, 6)" in message
    assert "Include more surrounding lines in SEARCH to make it unique" in message
    assert_unchanged(ws, "m.py", SOURCE)


def test_edit_overlapping_matches_count_as_ambiguous(ws: Workspaces) -> None:
    ws.ok("write_file", path="a.txt", content="aaa")
    assert "2 times" in ws.fail("edit_file", "VALIDATION_FAILED", path="a.txt", edits=block("aa", "b"))


MALFORMED = {
    "no blocks": ("just some text", "line 1: text outside a block"),
    "missing divider": (
        "<<<<<<< SEARCH\nold\n>>>>>>> REPLACE",
        "block 1: '>>>>>>> REPLACE' at line 3 before its '======='",
    ),
    "missing replace marker": (
        "<<<<<<< SEARCH\nold\n=======\nnew",
        "block 1 is not closed: the '>>>>>>> REPLACE' line",
    ),
    "missing search marker": ("old\n=======\nnew\n>>>>>>> REPLACE", "line 1: text outside a block"),
    "divider outside": ("=======", "line 1: '=======' outside a block"),
    "near-miss marker": (
        "<<<<<< SEARCH\nold\n=======\nnew\n>>>>>>> REPLACE",
        "line 1 ('<<<<<< SEARCH') looks like a marker",
    ),
    "empty search": ("<<<<<<< SEARCH\n\n=======\nnew\n>>>>>>> REPLACE", "block 1: the SEARCH part is empty"),
    "second block broken": (
        block("def a", "def x") + "\n<<<<<<< SEARCH\nb\n=======\nc\n=======\n>>>>>>> REPLACE",
        "block 2: '=======' at line 10 before its '>>>>>>> REPLACE'",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_edit_blocks_write_nothing(ws: Workspaces, case: str) -> None:
    edits, expected = MALFORMED[case]
    ws.ok("write_file", path="m.py", content=SOURCE)
    message = ws.fail("edit_file", "VALIDATION_FAILED", path="m.py", edits=edits)
    assert message.startswith("malformed edit: ") and expected in message, message
    assert "Nothing was written" in message
    assert_unchanged(ws, "m.py", SOURCE)


def test_edit_missing_file(ws: Workspaces) -> None:
    ws.fail("edit_file", "NOT_FOUND", path="nope.py", edits=block("a", "b"))


# list --------------------------------------------------------------------------------------


@pytest.fixture
def tree(ws: Workspaces) -> Workspaces:
    for path in ["README.md", "src/app.py", "src/lib/util.py", "src/lib/data.json", "notes/a.txt", "notes/b.txt"]:
        ws.ok("write_file", path=path, content=f"content of {path}\n")
    return ws


@pytest.mark.parametrize(
    ("glob", "expected"),
    [
        (None, ["README.md", "notes/a.txt", "notes/b.txt", "src/app.py", "src/lib/data.json", "src/lib/util.py"]),
        ("*.py", ["src/app.py", "src/lib/util.py"]),
        ("src/*.py", ["src/app.py"]),
        ("src/**/*.py", ["src/app.py", "src/lib/util.py"]),
        ("src/lib/", ["src/lib/data.json", "src/lib/util.py"]),
        ("notes", ["notes/a.txt", "notes/b.txt"]),
        ("notes/?.txt", ["notes/a.txt", "notes/b.txt"]),
        ("[a]*", ["notes/a.txt", "src/app.py"]),
        ("*.rs", []),
    ],
)
def test_list_files_globs(tree: Workspaces, glob: str | None, expected: list[str]) -> None:
    result = tree.ok("list_files", **({"glob": glob} if glob else {}))
    assert [entry["path"] for entry in result.output["files"]] == expected
    if expected:
        assert f"{expected[0]}  (" in result.text


def test_list_files_is_capped(tree: Workspaces) -> None:
    capped = dataclasses.replace(TOOLS["list_files"], handler=functools.partial(find_tools.list_files, max_entries=2))
    result = tree.run("list_files", tool=capped)
    assert result.ok, result.display_text()
    assert len(result.output["files"]) == 2 and result.output["total_matches"] == 6
    assert "[... 4 more not shown; narrow the glob]" in result.text


def test_list_files_shows_at_most_the_default_cap(ws: Workspaces) -> None:
    ws.root().mkdir(parents=True, exist_ok=True)
    for n in range(find_tools.MAX_LIST_ENTRIES + 1):
        (ws.root() / f"f{n:03}.txt").write_text("x")
    result = ws.ok("list_files")
    assert len(result.output["files"]) == find_tools.MAX_LIST_ENTRIES and "[... 1 more not shown" in result.text


def test_list_empty_workspace(ws: Workspaces) -> None:
    assert "The workspace is empty" in ws.ok("list_files").text


@pytest.mark.parametrize(
    ("glob", "code"),
    [
        ("../*", "PERMISSION_DENIED"),
        ("/etc/*", "PERMISSION_DENIED"),
        ("src\\*.py", "VALIDATION_FAILED"),
        ("a\x00*", "VALIDATION_FAILED"),
    ],
)
def test_list_refuses_escaping_globs(ws: Workspaces, glob: str, code: str) -> None:
    ws.fail("list_files", code, glob=glob)


# search ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def main *.py", ("def main", "*.py")),
        ("TODO src/**", ("TODO", "src/**")),
        ("TODO notes/?.txt", ("TODO", "notes/?.txt")),
        ("*.py", ("*.py", None)),
        ("foo .*bar", ("foo .*bar", None)),
        ("x = a*", ("x = a*", None)),
        ("x [a-z]*", ("x [a-z]*", None)),
        ("(TODO *.py)", ("(TODO *.py)", None)),
        ("error: file.txt", ("error: file.txt", None)),
    ],
)
def test_trailing_glob_rule(text: str, expected: tuple[str, str | None]) -> None:
    assert split_trailing_glob(text) == expected


def test_search_reports_file_line_text(tree: Workspaces) -> None:
    tree.ok("write_file", path="src/app.py", content="import os\n\ndef main():\n    pass\n")
    result = tree.ok("search_files", pattern="def main|content of s *.py")
    assert result.output["file_glob"] == "*.py"
    assert [(m["path"], m["line"]) for m in result.output["matches"]] == [("src/app.py", 3), ("src/lib/util.py", 1)]
    assert "src/app.py:3: def main():" in result.text.split("\n")


def test_search_invalid_regex(ws: Workspaces) -> None:
    message = ws.fail("search_files", "VALIDATION_FAILED", pattern="(unclosed")
    assert "missing )" in message


def test_search_match_cap(ws: Workspaces) -> None:
    ws.ok("write_file", path="many.txt", content="hit\n" * 150)
    result = ws.ok("search_files", pattern="hit")
    assert len(result.output["matches"]) == MAX_MATCHES and result.output["truncated"] is True
    assert f"first {MAX_MATCHES} shown" in result.text


def test_catastrophic_regex_times_out_quickly(ws: Workspaces) -> None:
    ws.ok("write_file", path="evil.txt", content="a" * 5000 + "b\n")
    message = ws.fail("search_files", "TIMEOUT", pattern="(a+)+$")
    assert "evil.txt:1" in message and "nested quantifiers" in message  # the one line's own timeout, named


def test_whole_search_is_bounded_by_the_tool_deadline(ws: Workspaces) -> None:
    """Each line costs about 0.15 s of backtracking, under the per-line timeout; the 50 of them about
    7 s, under SEARCH_WALL_S. Only the tool's 0.5 s deadline stops the search: without it the search
    would end with no match, after burning those 7 s of CPU in its one-off worker."""
    ws.ok("write_file", path="evil.txt", content=("a" * 18 + "!\n") * 50)
    quick = dataclasses.replace(TOOLS["search_files"], timeout_s=0.5)
    with ReapedCpu() as cpu:
        result = ws.run("search_files", tool=quick, pattern="(a|a)+$")
    assert result.error_code == "TIMEOUT", result
    assert cpu.seconds < 3, cpu.seconds


def test_compile_time_bomb_is_refused_within_the_workers_budget(ws: Workspaces) -> None:
    """`regex` expands counted repetitions when compiling: this pattern alone asked for 2.6 GB.
    It is compiled in the worker, which runs out of its budget; this process never grows."""
    ws.ok("write_file", path="notes.txt", content="x marks the spot\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    message = ws.fail("search_files", "VALIDATION_FAILED", pattern="(?:(?:x{999}){999}){9}")  # MEMORY, not TIMEOUT
    assert "too complex" in message and f"{find_tools.SEARCH_MEMORY_MB} MB" in message
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 20_000  # KB


def test_search_keeps_the_regex_syntax(ws: Workspaces) -> None:
    """Backreferences and look-arounds (what `regex` offers beyond a linear-time engine) still work."""
    ws.ok("write_file", path="words.txt", content="book\ncat\nfoobar\n")
    found = ws.ok("search_files", pattern=r"(\w)\1|foo(?=bar)").output["matches"]
    assert [(m["path"], m["line"]) for m in found] == [("words.txt", 1), ("words.txt", 3)]


def test_search_streams_many_files_and_reports_binary_ones(ws: Workspaces) -> None:
    for index in range(30):
        ws.ok("write_file", path=f"f{index:02}.txt", content=f"line {index}\n" * 1000)
    (ws.root() / "blob.bin").write_bytes(b"\x00\x01 line")
    result = ws.ok("search_files", pattern=r"^line 2\d$")
    assert result.output["truncated"] is True and len(result.output["matches"]) == MAX_MATCHES
    assert ws.ok("search_files", pattern="line 7$").output["binary_skipped"] == 1


def test_searches_reuse_the_apps_warm_worker_and_a_full_pool_is_a_clear_busy_error(ws: Workspaces) -> None:
    """With the app's pool in `ctx.bounded` every search runs in the same warm worker
    (no process start, no import of `regex` per call); when other work holds every worker the
    search waits at most its own deadline, then tells the model to try again."""
    ws.ok("write_file", path="a.txt", content="needle\n")
    with WorkerPool(1) as pool:
        ctx = dataclasses.replace(ws.ctx(), bounded=pool)
        for _ in range(3):
            assert run_tool(TOOLS["search_files"], {"pattern": "needle"}, ctx).output["matches"]
        assert len(pool.worker_pids(SEARCH)) == 1
        release = CancelToken()  # the holder keeps the one worker until the test lets it go
        holder = threading.Thread(
            target=pool.run,
            args=(HOLD, Job("tests.bounded_jobs:sleep", {"seconds": 60.0}), Limits(wall_s=120.0), release),
        )
        holder.start()
        wait_until(lambda: pool.worker_pids(HOLD), "the holder never got the worker")
        quick = dataclasses.replace(TOOLS["search_files"], timeout_s=0.5)
        result = run_tool(quick, {"pattern": "needle"}, ctx)
        assert result.error_code == "BUSY" and "busy" in result.message and "try again" in result.message
        assert holder.is_alive()  # it gave up at its own deadline, not when the worker came free
        release.cancel()
        holder.join()


# isolation ---------------------------------------------------------------------------------


def test_users_cannot_see_each_other(ws: Workspaces) -> None:
    ws.ok("write_file", path="diary.txt", content="alice's secret\n")
    assert ws.ok("list_files", user=ws.bob).output["files"] == []
    ws.fail("read_file", "NOT_FOUND", user=ws.bob, path="diary.txt")
    assert ws.ok("search_files", user=ws.bob, pattern="secret").output["matches"] == []
    ws.ok("write_file", user=ws.bob, path="diary.txt", content="bob's\n")
    assert (ws.root() / "diary.txt").read_text() == "alice's secret\n"
    assert ws.root() != ws.root(ws.bob)


# end to end: one /chat turn per tool -------------------------------------------------------


@pytest.fixture
def base_settings(base_settings: dict[str, Any]) -> dict[str, Any]:
    """These turns test the tools: writes run at once (asking first: tests/api/test_approval_api.py)."""
    return {**base_settings, "tool_approval": "none"}


def chat(client: FlaskClient, auth: dict[str, str], message: str) -> dict[str, Any]:
    response = client.post("/chat", json={"message": message}, headers=auth)
    assert response.status_code == 200
    return response.get_json()


def user_root(base_settings: dict[str, Any]) -> Path:
    (root,) = (Path(base_settings["data_dir"]) / "workspaces").iterdir()
    return root


def tool_turn(client: FlaskClient, auth: dict[str, str], fake_llm: Any, reply: str) -> str:
    fake_llm.queue(reply, "Done.")
    body = chat(client, auth, "please do it")
    assert [m["role"] for m in body["messages"]] == ["user", "file_tools", "assistant"]
    assert body["reply"] == "Done."
    content = body["messages"][1]["content"]
    assert content.startswith("<details>\n<summary>🔧 file_tools</summary>")
    assert fake_llm.requests[-1]["messages"][-1]["content"].endswith(content)  # the second pass saw it
    return content


def test_chat_write_file(client, auth, fake_llm, base_settings) -> None:
    content = tool_turn(client, auth, fake_llm, "/write_file notes/a.txt\nhello")
    assert "> Created notes/a.txt (5 bytes, 1 lines)." in content
    assert (user_root(base_settings) / "notes/a.txt").read_text() == "hello"


def test_chat_read_file(client, auth, fake_llm) -> None:
    assert (
        client.post("/tools/write_file", json={"path": "a.txt", "content": "<b>hi</b>\n"}, headers=auth).status_code
        == 200
    )
    content = tool_turn(client, auth, fake_llm, "/read_file a.txt")
    assert ">     1  &lt;b&gt;hi&lt;/b&gt;" in content


def test_chat_edit_file(client, auth, fake_llm, base_settings) -> None:
    client.post("/tools/write_file", json={"path": "a.py", "content": "x = 1\ny = 2\n"}, headers=auth)
    content = tool_turn(client, auth, fake_llm, "/edit_file a.py\n```\n" + block("y = 2", "y = 3") + "\n```")
    assert "> Edited a.py: applied 1 block" in content
    assert (user_root(base_settings) / "a.py").read_text() == "x = 1\ny = 3\n"


def test_chat_list_files(client, auth, fake_llm) -> None:
    client.post("/tools/write_file", json={"path": "src/a.py", "content": "x\n"}, headers=auth)
    content = tool_turn(client, auth, fake_llm, "/list_files *.py")
    assert "> src/a.py  (2 bytes)" in content


def test_chat_search_files(client, auth, fake_llm) -> None:
    client.post("/tools/write_file", json={"path": "src/a.py", "content": "def main():\n    pass\n"}, headers=auth)
    content = tool_turn(client, auth, fake_llm, "/search_files def \\w+ *.py")
    assert "> src/a.py:1: def main():" in content


def test_chat_error_is_stored_in_the_contract(client, auth, fake_llm) -> None:
    content = tool_turn(client, auth, fake_llm, "/read_file ../../etc/passwd")
    assert "> Error: PERMISSION_DENIED: " in content
    assert "root:" not in content
