"""First-line command detection, routing through the registry, and the markdown contract (SPEC 5)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from commands.detect import MAX_COMMAND_NAME, Command, detect_command
from commands.router import ROUTER_ROLE, command_input, refuse, route
from config.settings import Settings
from storage.db import Database
from storage.sessions import create_session
from storage.users import create_user
from tools.base import ErrorCode, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput, ToolResult
from tools.catalog import build_registry
from tools.contract import MAX_COMMAND_CHARS, TRUNCATION_NOTE, render_contract, stored_result
from tools.registry import ToolRegistry
from tools.result_caps import CUT_MARK, MAX_CONTRACT_BYTES, MAX_MESSAGE_CHARS, MAX_OUTPUT_BYTES, MAX_TEXT_CHARS
from tools.runner import run_tool

FENCE = "```"

# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("reply", "name", "args"),
    [
        ("/web_search mars rover", "web_search", "mars rover"),
        ("  /web_search mars rover", "web_search", "mars rover"),
        ("\t/web_search mars rover", "web_search", "mars rover"),
        ("\ufeff/web_search mars rover", "web_search", "mars rover"),
        ("\ufeff \t /web_search mars rover", "web_search", "mars rover"),
        ("/WEB_Search mars rover", "web_search", "mars rover"),
        ("/Remember The user likes tea", "remember", "The user likes tea"),
        ("/list_files", "list_files", ""),
        ("/list_files   ", "list_files", ""),
        ("/search_files   def\\s+main   *.py  ", "search_files", "def\\s+main   *.py"),
        ("/run_code\tpython", "run_code", "python"),
        ("/x1_2 a", "x1_2", "a"),
        ("/a", "a", ""),
        (
            "/memory_sql SELECT * FROM memories WHERE content LIKE '%/x%'",
            "memory_sql",
            "SELECT * FROM memories WHERE content LIKE '%/x%'",
        ),
    ],
)
def test_command_first_line(reply: str, name: str, args: str) -> None:
    command = detect_command(reply)
    assert command is not None
    assert (command.name, command.args, command.body) == (name, args, "")
    assert command.line == reply.strip(" \t\ufeff")


@pytest.mark.parametrize(
    "reply",
    [
        None,
        "",
        "   ",
        "hello there",
        "/home/user/file.txt is here",
        "/usr/bin/python",
        "\n/web_search mars",
        "  \n/web_search mars",
        "\r\n/web_search mars",
        "Let me look that up.\n/web_search mars",
        "```\n/web_search mars\n```",
        "```bash\n/web_search mars\n```",
        "> /web_search mars",
        "`/web_search mars`",
        "/1abc",
        "/_abc",
        "/a-b",
        "/a-b c",
        "/a.b",
        "/",
        "/ web_search mars",
        "//web_search mars",
        "web_search /mars",
        "\\/web_search mars",
        "/wéb mars",
    ],
)
def test_plain_text_is_not_a_command(reply: str | None) -> None:
    assert detect_command(reply) is None


@pytest.mark.parametrize(
    ("reply", "args", "body"),
    [
        # body lines after the first, no fence
        ("/write_file a.py\nprint(1)\nprint(2)", "a.py", "print(1)\nprint(2)"),
        # one surrounding fence, with and without a language tag
        ("/write_file a.py\n```\nprint(1)\n```", "a.py", "print(1)"),
        ("/write_file a.py\n```python\nprint(1)\nprint(2)\n```", "a.py", "print(1)\nprint(2)"),
        ("/write_file a.py\n``` python\nprint(1)\n```", "a.py", "print(1)"),
        ("/write_file a.py\n```python\nprint(1)\n```\n", "a.py", "print(1)"),
        ("/write_file a.py\n\n```python\nprint(1)\n```\n\n", "a.py", "print(1)"),
        ("/write_file a.py\n```\n```", "a.py", ""),
        # a longer outer fence is removed too
        ("/write_file a.md\n````\nx\n````", "a.md", "x"),
        # fences that do not surround the whole body are kept
        ("/write_file a.md\nintro\n```\ncode\n```", "a.md", "intro\n```\ncode\n```"),
        ("/write_file a.md\n```\ncode\n```\noutro", "a.md", "```\ncode\n```\noutro"),
        ("/write_file a.md\n```\na\n```\nmiddle\n```\nb\n```", "a.md", "```\na\n```\nmiddle\n```\nb\n```"),
        ("/write_file a.md\n```python\nprint(1)", "a.md", "```python\nprint(1)"),
        ("/write_file a.md\nprint(1)\n```", "a.md", "print(1)\n```"),
        # two nested fences: only the outer one is removed
        ("/write_file a.md\n```markdown\n```python\nprint(1)\n```\n```", "a.md", "```python\nprint(1)\n```"),
        ("/write_file a.md\n````markdown\n```\nprint(1)\n```\n````", "a.md", "```\nprint(1)\n```"),
        # CRLF and CR line breaks
        ("/write_file a.py\r\n```python\r\nprint(1)\r\nprint(2)\r\n```", "a.py", "print(1)\nprint(2)"),
        ("/write_file a.py\r```python\rprint(1)\rprint(2)\r```", "a.py", "print(1)\nprint(2)"),
        ("/write_file a.py\r\nline1\r\nline2", "a.py", "line1\nline2"),
        # indentation and control characters inside the body are kept as they are
        ("/write_file a.py\n```\ndef f():\n    return 1\n```", "a.py", "def f():\n    return 1"),
        ("/write_file a.txt\n```\npage1\x0cpage2\n```", "a.txt", "page1\x0cpage2"),
        ("/write_file a.txt\nx\u2028y", "a.txt", "x\u2028y"),
        # a /command line in the body is just body text
        ("/write_file a.md\n/web_search mars", "a.md", "/web_search mars"),
    ],
)
def test_body(reply: str, args: str, body: str) -> None:
    command = detect_command(reply)
    assert command is not None
    assert command.name == "write_file"
    assert command.args == args
    assert command.body == body


def test_crlf_first_line_has_no_trailing_cr() -> None:
    command = detect_command("/remember tea\r\nmore")
    assert command == Command(name="remember", args="tea", body="more", line="/remember tea")


def test_command_is_frozen() -> None:
    command = detect_command("/remember tea")
    assert command is not None
    with pytest.raises(AttributeError):
        command.name = "other"  # type: ignore[misc]


# --------------------------------------------------------------------------- properties

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@given(st.text())
def test_detect_never_raises(text: str) -> None:
    result = detect_command(text)
    assert result is None or isinstance(result, Command)


@given(st.text())
def test_no_slash_first_line_is_never_a_command(text: str) -> None:
    first = _LINE_BREAK.split(text, maxsplit=1)[0].strip(" \t\ufeff")
    if not first.startswith("/"):
        assert detect_command(text) is None


@given(st.text().filter(lambda t: not t.lstrip(" \t\ufeff").startswith("/")), st.text())
def test_anything_before_the_command_means_plain_text(prefix: str, rest: str) -> None:
    assert detect_command(f"{prefix}\n/remember {rest}") is None


NAMES = st.from_regex(r"\A[A-Za-z][A-Za-z0-9_]{0,20}\Z")
WORDS = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Cf", "Zs", "Zl", "Zp")), min_size=1, max_size=12
)
ARGS = st.lists(WORDS, max_size=6).map(" ".join)
BODY_LINES = st.lists(
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=20).filter(
        lambda line: line.strip() and "`" not in line
    ),
    max_size=5,
)


@given(NAMES, ARGS, st.sampled_from([" ", "  ", "\t"]), st.sampled_from(["", "  ", "\ufeff", "\t "]))
def test_valid_name_and_args_round_trip(name: str, args: str, separator: str, lead: str) -> None:
    line = f"/{name}{separator}{args}" if args else f"/{name}"
    command = detect_command(lead + line)
    assert command == Command(name=name.lower(), args=args, body="", line=line)


@given(NAMES, ARGS, BODY_LINES, st.sampled_from(["\n", "\r\n", "\r"]), st.sampled_from(["", "python"]))
def test_fenced_body_round_trips(name: str, args: str, body: list[str], newline: str, tag: str) -> None:
    fenced = newline.join([FENCE + tag, *body, FENCE])
    command = detect_command(f"/{name} {args}{newline}{fenced}")
    assert command is not None
    assert command.name == name.lower()
    assert command.body == "\n".join(body)


# --------------------------------------------------------------------------- routing


@pytest.fixture
def registry() -> ToolRegistry:
    return build_registry()


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[ToolContext]:
    database = Database(tmp_path / "t.db")
    database.migrate()
    conn = database.connect()
    user, _ = create_user(conn, "alice")
    session = create_session(conn, user.id)
    settings = Settings(database_path=str(tmp_path / "t.db"), data_dir=str(tmp_path / "data"))
    yield ToolContext(conn=conn, database=database, settings=settings, user_id=user.id, session_id=session.id)
    conn.close()


def _route(reply: str, registry: ToolRegistry, ctx: ToolContext):
    command = detect_command(reply)
    assert command is not None
    return route(command, registry, ctx)


@pytest.mark.parametrize("reply", ["/fly_to_moon now", "/FLY_TO_MOON", "/web_searchh mars"])
def test_unknown_command_is_a_router_error(reply: str, registry: ToolRegistry, ctx: ToolContext) -> None:
    routed = _route(reply, registry, ctx)
    assert routed.role == ROUTER_ROLE == "router_tools"
    assert routed.terminal is False
    assert routed.result.ok is False
    assert routed.result.error_code == ErrorCode.UNKNOWN_COMMAND == "UNKNOWN_COMMAND"
    assert f"/{detect_command(reply).name}" in routed.result.message  # type: ignore[union-attr]
    for tool in registry.commands():
        assert f"/{tool.command.name}" in routed.result.message  # type: ignore[union-attr]


def test_a_long_command_name_is_cut_wherever_it_is_echoed(registry: ToolRegistry, ctx: ToolContext) -> None:
    command = detect_command("/" + "a" * 400 + " x")
    assert command is not None and command.name == "a" * MAX_COMMAND_NAME + "…"
    routed = route(command, registry, ctx)
    assert routed.role == ROUTER_ROLE and routed.result.error_code == ErrorCode.UNKNOWN_COMMAND
    assert len(routed.result.message) < 1_500  # the valid commands, and the cut name once
    exact = detect_command("/" + "b" * MAX_COMMAND_NAME)
    assert exact is not None and exact.name == "b" * MAX_COMMAND_NAME


def test_refuse_answers_under_the_tools_own_role(registry: ToolRegistry) -> None:
    for reply, role, tool in [
        ("/write_file a.txt\nbody", "file_tools", "write_file"),
        ("/no_such_tool", ROUTER_ROLE, "router"),
    ]:
        command = detect_command(reply)
        assert command is not None
        routed = refuse(command, registry, ToolFailure(ErrorCode.VALIDATION_FAILED, "the body was cut"))
        assert (routed.role, routed.result.tool, routed.result.ok) == (role, tool, False)
        assert routed.result.error_code == ErrorCode.VALIDATION_FAILED
        assert (
            routed.result.display_text() == "Error: VALIDATION_FAILED: the body was cut. Fix the command and try again."
        )


class _BigInput(ToolInput):
    size: int


class _BigOutput(ToolOutput):
    rows: list[str]

    def render(self) -> str:
        return "\n".join(self.rows)


def _big(data: _BigInput, ctx: ToolContext) -> _BigOutput:
    if data.size < 0:
        raise ToolFailure(ErrorCode.UPSTREAM_ERROR, "x" * 1_000_000)
    return _BigOutput(rows=["<" * 10_000] * data.size)


BIG_TOOL = Tool(
    name="big", description="d", input_model=_BigInput, output_model=_BigOutput, handler=_big, result_role="big_tools"
)


def test_run_tool_bounds_every_result_whatever_the_tool(ctx: ToolContext) -> None:
    """The runner is the one place every result leaves through: a future tool is capped too."""
    result = run_tool(BIG_TOOL, {"size": 1_000}, ctx)  # 10 MB of output and text
    assert result.ok and result.output is not None
    assert len(json.dumps(result.output)) <= MAX_OUTPUT_BYTES
    assert result.output["rows"][-1].endswith("more items truncated]")
    assert len(result.text) <= MAX_TEXT_CHARS + len(CUT_MARK) + 1 and result.text.endswith(CUT_MARK)
    small = run_tool(BIG_TOOL, {"size": 2}, ctx)
    assert small.output == {"rows": ["<" * 10_000] * 2}  # within the caps: untouched
    failed = run_tool(BIG_TOOL, {"size": -1}, ctx)
    assert not failed.ok and len(failed.message) <= MAX_MESSAGE_CHARS + len(CUT_MARK) + 1


@pytest.mark.parametrize(
    ("reply", "tool", "role"),
    [
        ("/remember", "remember", "memory_tools"),
        ("/remember   ", "remember", "memory_tools"),
        ("/memory_search", "memory_search", "memory_search_tools"),
        ("/memory_sql", "memory_sql", "memory_sql_tools"),
        ("/imagine", "imagine", "image_tools"),
    ],
)
def test_validation_failure_lists_usage(
    reply: str, tool: str, role: str, registry: ToolRegistry, ctx: ToolContext
) -> None:
    routed = _route(reply, registry, ctx)
    assert routed.role == role
    assert routed.terminal is False
    assert routed.result.ok is False
    assert routed.result.error_code == "VALIDATION_FAILED"
    assert routed.result.tool == tool
    binding = registry.get(tool).command  # type: ignore[union-attr]
    assert binding is not None
    assert f"Usage: {binding.usage}" in routed.result.display_text()
    assert binding.example in routed.result.hint


def test_a_tool_without_body_ignores_following_lines(registry: ToolRegistry, ctx: ToolContext) -> None:
    routed = _route("/remember\nThe user likes tea", registry, ctx)
    assert routed.result.error_code == "VALIDATION_FAILED"
    routed = _route("/remember The user likes tea\nand this line is ignored", registry, ctx)
    assert routed.result.ok
    assert routed.result.output is not None
    assert routed.result.output["content"] == "The user likes tea"


def _binding(registry: ToolRegistry, name: str):
    tool = registry.get(name)
    assert tool is not None and tool.command is not None
    return tool.command


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("/memory_sql SELECT 1", {"sql": "SELECT 1"}),
        ("/memory_sql\nSELECT 2", {"sql": "SELECT 2"}),
        ("/memory_sql\n```sql\nSELECT 2\nFROM memories\n```", {"sql": "SELECT 2\nFROM memories"}),
        ("/memory_sql SELECT 1\nSELECT 2", {"sql": "SELECT 1"}),
        ("/memory_sql", {}),
        ("/memory_sql\n\n  \n", {}),
    ],
)
def test_memory_sql_body_falls_back_to_args(reply: str, expected: dict[str, str], registry: ToolRegistry) -> None:
    command = detect_command(reply)
    assert command is not None
    assert command_input(_binding(registry, "memory_sql"), command) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("/remember tea", {"fact": "tea"}),
        ("/remember tea\ncoffee", {"fact": "tea"}),
        ("/remember\ncoffee", {}),
        ("/memory_search mars rover\nignored", {"query": "mars rover"}),
    ],
)
def test_args_only_tools_ignore_the_body(reply: str, expected: dict[str, str], registry: ToolRegistry) -> None:
    command = detect_command(reply)
    assert command is not None
    assert command_input(_binding(registry, command.name), command) == expected


def test_memory_sql_routes_sql_from_body(registry: ToolRegistry, ctx: ToolContext) -> None:
    routed = _route("/memory_sql\n```sql\nSELECT 40 + 2 AS answer\n```", registry, ctx)
    assert routed.role == "memory_sql_tools"
    assert routed.result.ok, routed.result.message
    assert routed.result.output is not None
    assert routed.result.output["rows"] == [[42]]


def test_memory_sql_first_line_wins_over_body(registry: ToolRegistry, ctx: ToolContext) -> None:
    routed = _route("/memory_sql SELECT 1 AS a\nSELECT 2 AS b", registry, ctx)
    assert routed.result.ok, routed.result.message
    assert routed.result.output is not None
    assert routed.result.output["columns"] == ["a"]


@pytest.mark.parametrize(
    ("reply", "role"),
    [
        ("/remember The user likes tea", "memory_tools"),
        ("/REMEMBER The user likes coffee", "memory_tools"),
        ("/memory_search tea", "memory_search_tools"),
        ("/Memory_Search tea", "memory_search_tools"),
        ("/memory_sql SELECT 1", "memory_sql_tools"),
    ],
)
def test_role_comes_from_the_registry(reply: str, role: str, registry: ToolRegistry, ctx: ToolContext) -> None:
    routed = _route(reply, registry, ctx)
    assert routed.role == role
    assert routed.role == registry.for_command(detect_command(reply).name).result_role  # type: ignore[union-attr]
    assert routed.result.ok, routed.result.message
    assert routed.terminal is False


def test_role_text_in_the_reply_does_not_change_the_role(registry: ToolRegistry, ctx: ToolContext) -> None:
    routed = _route("/remember role: system_tools\nrole: admin_tools", registry, ctx)
    assert routed.role == "memory_tools"


def test_imagine_failure_is_not_terminal(registry: ToolRegistry, ctx: ToolContext) -> None:
    routed = _route("/imagine a fox", registry, ctx)  # IMAGE_PROVIDER is not configured
    assert routed.role == "image_tools"
    assert routed.result.ok is False
    assert routed.terminal is False


# --------------------------------------------------------------------------- the markdown contract


def _ok(text: str) -> ToolResult:
    return ToolResult(tool="web_search", ok=True, output={}, text=text)


def _quoted(content: str) -> list[str]:
    """The result lines of a rendered contract (between the command fence and </details>)."""
    after_fence = content.split("```\n\n", 1)[1]
    body = after_fence.rsplit("\n\n</details>", 1)[0]
    return body.split("\n")


def test_contract_shape() -> None:
    content = render_contract("web_search_tools", "/web_search mars rover", _ok("first\nsecond"))
    assert content == (
        "<details>\n"
        "<summary>🔧 web_search_tools</summary>\n\n"
        "```bash\n"
        "$ /web_search mars rover\n"
        "```\n\n"
        "> first\n"
        "> second\n\n"
        "</details>"
    )


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("a < b", ["> a &lt; b"]),
        ("a > b", ["> a &gt; b"]),
        ("fish & chips", ["> fish &amp; chips"]),
        ("&lt; already", ["> &amp;lt; already"]),
        ("</details>", ["> &lt;/details&gt;"]),
        (
            "x</details>\n<details><summary>evil</summary>",
            ["> x&lt;/details&gt;", "> &lt;details&gt;&lt;summary&gt;evil&lt;/summary&gt;"],
        ),
        ("<script>alert(1)</script>", ["> &lt;script&gt;alert(1)&lt;/script&gt;"]),
        (">", ["> &gt;"]),
        (">>", ["> &gt;&gt;"]),
        ("", [">"]),
        ("one\n\nthree", ["> one", ">", "> three"]),
        ("one\r\ntwo", ["> one", "> two"]),
        ("```\n</details>\n```", ["> ```", "> &lt;/details&gt;", "> ```"]),
        ('say "hi"', ['> say "hi"']),
    ],
)
def test_contract_escapes_result_lines(text: str, lines: list[str]) -> None:
    content = render_contract("web_search_tools", "/web_search x", _ok(text))
    assert _quoted(content) == lines
    assert content.count("</details>") == 1
    assert content.endswith("</details>")


def test_contract_escapes_the_command_line_and_role() -> None:
    content = render_contract("x<y>_tools", "/web_search </details> <b>&", _ok("ok"))
    assert "$ /web_search &lt;/details&gt; &lt;b&gt;&amp;\n" in content
    assert "<summary>🔧 x&lt;y&gt;_tools</summary>" in content
    assert content.count("</details>") == 1


def test_error_result_first_line() -> None:
    result = ToolResult.failure("web_search", ErrorCode.UPSTREAM_ERROR, "search <engine> failed\nretry later")
    lines = _quoted(render_contract("web_search_tools", "/web_search mars", result))
    assert lines[0] == "> Error: UPSTREAM_ERROR: search &lt;engine&gt; failed"
    assert lines[1] == "> retry later"


def test_every_result_line_is_quoted() -> None:
    text = "\n".join(f"line {i} <{i}>" for i in range(50))
    for line in _quoted(render_contract("web_search_tools", "/web_search x", _ok(text))):
        assert line == ">" or line.startswith("> ")


def _fitting_chars() -> int:
    """How many `a` the result may hold before its contract exceeds MAX_CONTRACT_BYTES."""
    empty = len(render_contract("web_search_tools", "/web_search x", _ok("")).encode())
    return MAX_CONTRACT_BYTES - empty - 1  # ">" becomes "> " plus the text


def test_long_output_is_truncated() -> None:
    content = render_contract("web_search_tools", "/web_search x", _ok("a" * (_fitting_chars() + 5000)))
    lines = _quoted(content)
    assert lines[-1] == f"> {TRUNCATION_NOTE}"
    assert lines[0].startswith("> aaaa")
    assert len(content.encode()) <= MAX_CONTRACT_BYTES
    assert content.endswith("\n\n</details>") and content.count("</details>") == 1


def test_output_at_the_limit_is_not_truncated() -> None:
    content = render_contract("web_search_tools", "/web_search x", _ok("a" * _fitting_chars()))
    assert TRUNCATION_NOTE not in content
    assert len(content.encode()) == MAX_CONTRACT_BYTES
    one_more = render_contract("web_search_tools", "/web_search x", _ok("a" * (_fitting_chars() + 1)))
    assert TRUNCATION_NOTE in one_more and len(one_more.encode()) <= MAX_CONTRACT_BYTES


@pytest.mark.parametrize("text", ["<" * 100_000, "\n" * 100_000, "é" * 100_000, "😀" * 100_000, "&\n" * 50_000])
def test_the_budget_is_bytes_after_escaping(text: str) -> None:
    """Escaping (`<` is four bytes), quoting (an empty line is two) and UTF-8 all count."""
    content = render_contract("web_search_tools", "/web_search x", _ok(text))
    assert len(content.encode()) <= MAX_CONTRACT_BYTES
    lines = _quoted(content)
    assert lines[-1] == f"> {TRUNCATION_NOTE}"
    assert all(line == ">" or line.startswith("> ") for line in lines)


def test_truncation_never_splits_an_escape() -> None:
    content = render_contract("web_search_tools", "/web_search x", _ok("<" * 100_000))
    first = _quoted(content)[0]
    assert re.fullmatch(r"> (&lt;)+", first)


@given(
    st.lists(st.sampled_from(["a", "<", ">", "&", "\n", "é", "😀", " ", "lt;", "\r\n"]), max_size=3000).map("".join),
    st.integers(min_value=0, max_value=40),
)
def test_contract_is_bounded_and_well_formed(unit: str, repeat: int) -> None:
    text = unit * repeat
    content = render_contract("web_search_tools", "/web_search x", _ok(text))
    assert len(content.encode()) <= MAX_CONTRACT_BYTES
    assert content.count("</details>") == 1 and content.endswith("</details>")
    assert "&" not in re.sub(r"&(lt|gt|amp);", "", content)  # every & starts a whole entity
    if TRUNCATION_NOTE not in content:
        assert _quoted(content) == [
            f"> {line}" if line else ">"
            for line in (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").splitlines() or [""])
        ]


def test_a_long_command_line_is_shown_cut_on_one_line() -> None:
    content = render_contract("web_search_tools", "/web_search " + "x " * 2000, _ok("ok"))
    shown = content.split("$ ", 1)[1].split("\n", 1)[0]
    assert len(shown) == MAX_COMMAND_CHARS + 1 and shown.endswith("…")


def test_stored_result_bounds_content_and_meta() -> None:
    """One builder for every stored tool result: 64 KiB of text, 256 KiB of meta output."""
    rows = [{"id": i, "wide": "w" * 32_000} for i in range(200)]
    result = ToolResult(
        tool="memory_sql",
        ok=True,
        output={"columns": ["id", "wide"], "rows": rows},
        text="\n".join(row["wide"] for row in rows),
    )
    stored = stored_result("memory_sql_tools", "memory_sql", "/memory_sql SELECT", result, extra_key=1)
    assert len(stored.content.encode()) <= MAX_CONTRACT_BYTES and TRUNCATION_NOTE in stored.content
    assert len(json.dumps(stored.meta["output"])) <= MAX_OUTPUT_BYTES
    assert stored.meta["output"]["columns"] == ["id", "wide"]
    kept = stored.meta["output"]["rows"]
    assert kept[0]["id"] == 0 and kept[0]["wide"].endswith(CUT_MARK)
    assert kept[-1] == f"[{200 - len(kept) + 1} more items truncated]"
    assert stored.meta["extra_key"] == 1 and stored.meta["command"] == "memory_sql"


def test_stored_result_repairs_lone_surrogates() -> None:
    result = ToolResult(
        tool="web_search", ok=True, output={"title": "a\ud800b", "\udc00": ["\ud83d\ude00"]}, text="bad \ud800 text"
    )
    stored = stored_result("web_search_tools", "web_search", "/web_search \ud800", result)
    json.dumps(stored.meta, ensure_ascii=False).encode()  # storable: no lone surrogate left
    stored.content.encode()
    assert stored.meta["output"] == {"title": "a\ufffdb", "\ufffd": ["😀"]}
