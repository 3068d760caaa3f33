"""Tool blocks in a real browser (issue 12 part 6): the command body and SQL results.

The model (FakeLLMServer) answers with `/memory_sql`, `/run_code` and `/write_file`
commands whose bodies the pipeline stores in the tool message's `meta` (`args`, `body`);
the page shows that body collapsed, highlighted, as text (never as HTML), and a
`/memory_sql` result as a table built from `meta.output`, at most 50 rows drawn.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer
from tests.ui_support import XSS_MARKER, open_session_id, require_chromium, rest, send, serve, shot

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def server(llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """These blocks are of commands that ran: `/write_file` runs at once here (asking first:
    tests/ui/test_ui_approval.py)."""
    require_chromium()
    with serve(llm, tmp_path_factory.mktemp("blocks-server"), TOOL_APPROVAL="none") as running:
        yield running


HOSTILE = f'<img src=x onerror="{XSS_MARKER}=1"> & <b>bold</b>'
SQL = "SELECT id, role, content\nFROM messages\nWHERE role = 'user'\nORDER BY id"


def tool_block(ui: Any, command: str) -> Any:
    block = ui.locator(f".role-tool .tool-block:has(.tool-command:text-matches('^/{command}\\\\b'))").last
    block.wait_for()
    return block


def test_memory_sql_shows_its_query_and_a_table(ui: Any, llm: FakeLLMServer, server: dict[str, str]) -> None:
    llm.queue(f"/memory_sql\n{SQL}", "Those are your messages.")
    send(ui, HOSTILE)
    ui.locator(".role-assistant:has-text('Those are your messages.')").wait_for()
    block = tool_block(ui, "memory_sql")
    assert block.get_attribute("open") is None  # collapsed by default
    block.locator("summary").first.click()

    body = block.locator("details.command-body")
    assert body.get_attribute("open") is None  # the SQL is collapsed too
    assert body.locator("summary").inner_text() == "SQL (4 lines)"
    body.locator("summary").click()
    code = body.locator("code")
    assert code.inner_text() == SQL
    assert "language-sql" in code.get_attribute("class")
    assert body.locator(".hljs-keyword").first.inner_text() == "SELECT"  # highlighted
    assert body.locator(".code-lang").inner_text() == "sql"

    table = block.locator("table.sql-table")
    assert table.locator("th").all_inner_texts() == ["id", "role", "content"]
    rows = table.locator("tbody tr")
    assert rows.count() == 1
    cells = rows.first.locator("td").all_inner_texts()
    assert cells[1] == "user" and cells[2] == HOSTILE  # the markup is text in its cell
    assert table.locator("img, b").count() == 0
    assert block.locator(".sql-note").inner_text() == "1 row"

    stored = rest(server, "GET", f"/sessions/{open_session_id(ui)}/messages")["messages"]
    meta = next(message["meta"] for message in stored if message["role"] == "memory_sql_tools")
    assert meta["body"] == SQL and meta["args"] == "" and meta["body_truncated"] is False
    shot(ui, "60-tool-memory-sql-table")


def test_a_long_sql_result_draws_fifty_rows_and_says_so(ui: Any, llm: FakeLLMServer) -> None:
    query = (
        "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 120) SELECT x, NULL AS empty FROM n"
    )
    llm.queue(f"/memory_sql {query}", "Counted.")
    send(ui, "count to 120")
    ui.locator(".role-assistant:has-text('Counted.')").wait_for()
    block = tool_block(ui, "memory_sql")
    block.locator("summary").first.click()
    body = block.locator("details.command-body")
    assert body.locator("summary").inner_text() == "SQL (1 line)"  # the one-line form: the SQL is the argument
    body.locator("summary").click()
    assert body.locator("code").inner_text() == query
    rows = block.locator("table.sql-table tbody tr")
    assert rows.count() == 50
    assert rows.nth(49).locator("td").all_inner_texts() == ["50", "NULL"]
    assert block.locator("td.sql-null").count() == 50
    assert block.locator(".sql-note").inner_text() == "Showing 50 of 120 rows"
    shot(ui, "61-tool-sql-capped")


def test_run_code_and_write_file_show_their_body_as_highlighted_text(ui: Any, llm: FakeLLMServer) -> None:
    program = "for i in range(3):\n    print('<b>', i)"
    page = f"<script>{XSS_MARKER} = 1</script>\n<p>hi</p>"
    llm.queue(f"/run_code python\n{program}", "Ran it.")
    send(ui, "run a loop")
    ui.locator(".role-assistant:has-text('Ran it.')").wait_for()
    llm.queue(f"/write_file notes/page.html\n{page}", "Saved.")
    send(ui, "save a page")
    ui.locator(".role-assistant:has-text('Saved.')").wait_for()

    run = tool_block(ui, "run_code")
    run.locator("summary").first.click()
    body = run.locator("details.command-body")
    assert body.locator("summary").inner_text() == "Program (2 lines)"
    body.locator("summary").click()
    assert body.locator("code").inner_text() == program
    assert body.locator(".code-lang").inner_text() == "python"
    assert body.locator(".hljs-keyword").first.inner_text() == "for"
    assert body.locator("b").count() == 0

    written = tool_block(ui, "write_file")
    written.locator("summary").first.click()
    content = written.locator("details.command-body")
    assert content.locator("summary").inner_text() == "File content (2 lines)"
    content.locator("summary").click()
    assert content.locator("code").inner_text() == page
    assert content.locator(".code-lang").inner_text() == "xml"  # from the .html extension
    assert content.locator("script, p").count() == 0  # shown, never parsed as HTML
    shot(ui, "62-tool-bodies")


def test_a_command_without_body_shows_no_body_section(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue("/list_files", "Nothing there.")
    send(ui, "what files do I have?")
    ui.locator(".role-assistant:has-text('Nothing there.')").wait_for()
    block = tool_block(ui, "list_files")
    block.locator("summary").first.click()
    assert block.locator("details.command-body").count() == 0
    assert block.locator(".tool-output .markdown").count() == 1


def test_the_block_says_what_its_meta_says_not_what_the_text_quotes(
    ui: Any, llm: FakeLLMServer, server: dict[str, str]
) -> None:
    line = "/remember  I   like <tea> & cake"  # the contract text collapses the spaces and escapes <, > and &
    llm.queue(line, "Noted.")
    send(ui, "remember my tea")
    ui.locator(".role-assistant:has-text('Noted.')").wait_for()
    llm.queue("/read_file notes/missing.txt", "No such file.")
    send(ui, "read my notes")
    ui.locator(".role-assistant:has-text('No such file.')").wait_for()

    stored = rest(server, "GET", f"/sessions/{open_session_id(ui)}/messages")["messages"]
    remembered = next(message for message in stored if message["role"] == "memory_tools")
    assert remembered["meta"]["command_line"] == line
    assert "$ /remember I like &lt;tea&gt; &amp; cake" in remembered["content"]
    block = tool_block(ui, "remember")
    assert block.locator(".tool-command").text_content() == line  # from meta, as the model wrote it
    assert block.locator(".badge").text_content() == "ok"

    failed = next(message for message in stored if message["role"] == "file_tools")
    assert failed["meta"]["ok"] is False and failed["meta"]["code"]
    badge = tool_block(ui, "read_file").locator("summary .badge")
    assert badge.text_content() == failed["meta"]["code"]  # the code from meta, not "error"
    assert "badge-error" in (badge.get_attribute("class") or "")
