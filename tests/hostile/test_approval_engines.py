"""Whether `/memory_sql` asks first is decided by the engine that runs it (SPEC 8; issue 32).

More than 100 statements on BOTH engines, each with its outcome on each: `refused` (at once,
without asking), `asks` (the turn stops on an approval; approving runs it once), or `reads` (a
read-only run). Each statement goes through the four ways in: a real chat turn in which the
model (the fake, over HTTP) writes the command, `POST /tools/memory_sql`, `/v1` and `/mcp` (a
direct call is the user's own: it runs at once, or is refused). Whatever the outcome, nothing
is ever written without an approval: the memories are compared before and after every step.

The text tricks are the ones a scanner of words gets wrong: PostgreSQL's dollar quotes (`$$`,
`$tag$`), `E'…'` and `U&'…'` strings, both kinds of comment, CTEs, case and whitespace games,
`EXPLAIN ANALYZE`, functions with side effects, `SELECT … FOR UPDATE`, `COPY`, `CALL`, `DO`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from flask import Flask
from flask.testing import FlaskClient

from api.services import services_of
from mcp_server.endpoint import McpEndpoint
from storage.memories import add_memory
from testing.fake_llm import FakeLLMServer
from tests.conftest import new_token
from tests.mcp_support import asgi_post

Outcome = Literal["refused", "asks", "reads"]
R, A, S = "refused", "asks", "reads"

# (statement, on SQLite, on PostgreSQL)
STATEMENTS: list[tuple[str, Outcome, Outcome]] = [
    # plain reads
    ("SELECT * FROM memories", S, S),
    ("SELECT id, content FROM memories ORDER BY importance DESC LIMIT 2", S, S),
    ("SELECT count(*) FROM messages", S, S),
    ("select content from memories where content like '%update%'", S, S),
    ("SELECT content FROM memories WHERE content LIKE '%delete%'", S, S),
    ("SELECT 'UPDATE memories SET importance = 1' AS text", S, S),
    ("SELECT 1 -- UPDATE memories SET importance = 1", S, S),
    ("SELECT 1 /* UPDATE memories SET importance = 1 */", S, S),
    ("SELECT 'it''s' AS quoted", S, S),
    ('SELECT "content" FROM memories', S, S),
    ("SELECT m.content, count(x.id) FROM memories m LEFT JOIN messages x ON 1 = 0 GROUP BY m.content", S, S),
    ("WITH t AS (SELECT importance FROM memories) SELECT max(importance) FROM t", S, S),
    ("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 5) SELECT sum(n) FROM r", S, S),
    ("SELECT upper(content) FROM memories", S, S),
    ("SELECT row_number() OVER (ORDER BY id) FROM memories", S, S),
    ("  \n\tSELECT 1", S, S),
    ("sElEcT 1", S, S),
    ("SELECT 1;", S, S),
    ("(SELECT 1)", R, S),  # SQLite has no parenthesised statement
    ("VALUES (1)", S, S),
    ("SELECT id FROM memories UNION SELECT id FROM messages", S, S),
    ("SELECT content FROM memories WHERE id IN (SELECT id FROM memories WHERE importance > 2)", S, S),
    ("SELECT CASE WHEN importance > 3 THEN 'high' ELSE 'low' END FROM memories", S, S),
    ("SELECT coalesce(NULL, 'x')", S, S),
    ("SELECT length(content) FROM memories", S, S),
    # updates of memories: each asks, however it is written
    ("UPDATE memories SET importance = 3 WHERE id = 1", A, A),
    ("update memories set importance = 4 where id = 1", A, A),
    ("uPdAtE memories SeT importance = 5 WhErE id = 1", A, A),
    ("UPDATE\tmemories\nSET importance = 6\nWHERE id = 1", A, A),
    ("UPDATE/**/memories/**/SET/**/importance = 7 WHERE id = 1", A, A),
    ("/* a note */ UPDATE memories SET importance = 8 WHERE id = 1", A, A),
    ("-- a note\nUPDATE memories SET importance = 9 WHERE id = 1", A, A),
    ("UPDATE memories SET content = 'likes green tea' WHERE id = 2", A, A),
    ("UPDATE memories SET content = 'a -- b', importance = 2 WHERE id = 2", A, A),
    ("UPDATE memories SET content = 'select * from x' WHERE id = 3", A, A),
    ('UPDATE "memories" SET "importance" = 2 WHERE "id" = 3', A, A),
    ("UPDATE memories SET importance = importance WHERE true", A, A),
    ("UPDATE memories SET importance = 3 WHERE content LIKE '%tea%'", A, A),
    ("WITH t AS (SELECT 1) UPDATE memories SET importance = 1 WHERE id = 1", A, A),
    ("WITH RECURSIVE r(n) AS (SELECT 2) UPDATE memories SET importance = (SELECT n FROM r) WHERE id = 1", A, A),
    ("UPDATE memories SET importance = (SELECT max(importance) FROM memories) WHERE id = 3", A, A),
    ("UPDATE memories SET importance = 2 WHERE id IN (SELECT id FROM memories ORDER BY id LIMIT 1)", A, A),
    ("UPDATE memories SET importance = 2 WHERE id = 999", A, A),  # matches nothing: still a write to ask about
    ("UPDATE memories SET content = upper(content) WHERE id = 3", A, A),
    ("UPDATE memories SET importance = 4 WHERE id = 1;", A, A),
    # dollar quotes, E'' and U&'' strings: PostgreSQL's own syntax, a syntax error on SQLite
    ("WITH a AS (SELECT $$--$$) UPDATE memories SET importance = 3 WHERE true", R, A),
    ("SELECT $$UPDATE memories SET importance = 1$$", R, S),
    ("SELECT $tag$ it's -- not a comment $tag$", R, S),
    ("SELECT $a$ $$ nested $$ $a$", R, S),
    ("UPDATE memories SET content = $$ it's $$ WHERE id = 2", R, A),
    ("UPDATE memories SET content = $x$--$x$ WHERE id = 2", R, A),
    ("SELECT E'\\' -- UPDATE memories SET importance = 1'", R, S),
    ("SELECT E'it\\'s'", R, S),
    ("UPDATE memories SET content = E'tab\\there' WHERE id = 2", R, A),
    ("SELECT U&'\\0041'", R, S),
    ("SELECT U&'d\\0061t\\+000061' AS word", R, S),
    ("UPDATE memories SET content = U&'\\0041pple' WHERE id = 2", R, A),
    # not a memories update: refused at once, never asked
    ("UPDATE messages SET content = 'x'", R, R),
    ("UPDATE memories SET id = 5 WHERE id = 1", R, R),
    ("UPDATE memories SET created_at = 'x' WHERE id = 1", R, R),
    ("UPDATE memories SET importance = 99 WHERE id = 1", R, R),  # out of range: the engine's trigger
    ("UPDATE memories SET content = '' WHERE id = 1", R, R),
    ("UPDATE memories SET importance = 3 RETURNING id", R, R),
    ("DELETE FROM memories", R, R),
    ("delete from memories where id = 1", R, R),
    ("INSERT INTO memories (content, importance) VALUES ('x', 1)", R, R),
    ("INSERT INTO messages (session_id, role, content) VALUES ('s', 'user', 'x')", R, R),
    ("DROP TABLE memories", R, R),
    ("DROP VIEW messages", R, R),
    ("CREATE TABLE t (x int)", R, R),
    ("CREATE TEMP TABLE t (x int)", R, R),
    ("ALTER TABLE memories ADD COLUMN x int", R, R),
    ("CREATE VIEW v AS SELECT 1", R, R),
    ("CREATE TRIGGER t AFTER INSERT ON memories BEGIN SELECT 1; END", R, R),
    ("SELECT 1; UPDATE memories SET importance = 1", R, R),
    ("UPDATE memories SET importance = 1; SELECT 1", R, R),
    ("SELECT 1; SELECT 2", R, R),
    ("WITH x AS (DELETE FROM memories RETURNING id) SELECT * FROM x", R, R),
    ("WITH x AS (UPDATE memories SET importance = 1 RETURNING id) SELECT * FROM x", R, R),
    ("WITH x AS (INSERT INTO memories (content) VALUES ('x') RETURNING id) SELECT * FROM x", R, R),
    ("EXPLAIN ANALYZE UPDATE memories SET importance = 1", R, R),
    ("EXPLAIN UPDATE memories SET importance = 1", R, R),
    ("EXPLAIN SELECT 1", R, R),
    ("EXPLAIN QUERY PLAN SELECT 1", R, R),
    ("SELECT * FROM memories FOR UPDATE", R, R),
    ("SELECT * FROM memories FOR SHARE", R, R),
    ("COPY memories TO STDOUT", R, R),
    ("COPY memories FROM STDIN", R, R),
    ("CALL do_it()", R, R),
    ("DO $$ BEGIN UPDATE memories SET importance = 1; END $$", R, R),
    ("DO 'BEGIN NULL; END'", R, R),
    ("BEGIN", R, R),
    ("COMMIT", R, R),
    ("ROLLBACK", R, R),
    ("SAVEPOINT s", R, R),
    ("SET search_path = public", R, R),
    ("RESET ALL", R, R),
    ("PRAGMA table_info(memories)", R, R),
    ("PRAGMA writable_schema = 1", R, R),
    ("ATTACH DATABASE '/tmp/x.db' AS x", R, R),
    ("VACUUM", R, R),
    ("REINDEX", R, R),
    ("ANALYZE", R, R),
    ("SELECT * FROM sqlite_master", R, R),
    ("SELECT * FROM chat_messages", R, R),
    ("SELECT * FROM user_memories", R, R),
    ("SELECT * FROM api_tokens", R, R),
    ("SELECT * FROM users", R, R),
    ("SELECT * FROM pg_user", R, R),
    ("SELECT * FROM information_schema.tables", R, R),
    ("SELECT load_extension('x')", R, R),
    ("SELECT readfile('/etc/passwd')", R, R),
    ("SELECT pg_read_file('/etc/passwd')", R, R),
    ("SELECT pg_sleep(0)", R, R),
    ("SELECT set_config('statement_timeout', '0', false)", R, R),
    ("SELECT pg_advisory_lock(1)", R, R),
    ("SELECT pg_notify('c', 'x')", R, R),
    ("SELECT nextval('user_memories_id_seq')", R, R),
    ("SELECT txid_current()", R, R),
    ("SELECT lo_import('/etc/passwd')", R, R),
    ("SELECT pg_terminate_backend(1)", R, R),
    ("SELECT current_setting('is_superuser')", R, R),
    ("SELECT sqlite_version()", R, R),
    ("SELECT id FROM memories WHERE secret_column = 1", R, R),
    ("NOT SQL AT ALL", R, R),
    ("", R, R),
]


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(default_reply="noted") as server:
        yield server


@pytest.fixture
def app(make_app: Any, llm: FakeLLMServer, backend_settings: dict[str, str]) -> Flask:
    return make_app(
        llm_base_url=llm.openai_base_url, rate_limits="turns=off,sessions=off,tools=off", **backend_settings
    )


def memories(app: Flask, user_id: int) -> list[tuple[Any, ...]]:
    with services_of(app).database.connection() as conn:
        rows = conn.execute(
            "SELECT id, content, importance, updated_at FROM user_memories WHERE user_id = ? ORDER BY id", (user_id,)
        ).fetchall()
    return [tuple(row) for row in rows]


def seeded(app: Flask) -> tuple[str, int, FlaskClient]:
    token = new_token(app, "alice")
    client = app.test_client()
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    user_id = client.get("/api/me").get_json()["id"]
    with services_of(app).database.connection() as conn:
        for content, importance in (("likes tea", 3), ("lives in Paris", 5), ("plays chess", 2)):
            add_memory(conn, user_id, content, importance)
    return token, user_id, client


def command_line(sql: str) -> str:
    """How a model writes the call: on the first line, or (several lines) in the body."""
    return f"/memory_sql\n{sql}" if "\n" in sql.strip() or not sql else f"/memory_sql {sql}"


def outcome_of(stored: list[dict[str, Any]]) -> Outcome:
    """What a chat turn did with the command, from the rows it stored."""
    roles = [message["role"] for message in stored]
    if "ui_tools" in roles:
        return "asks"
    tool = next(message for message in stored if message["role"] == "memory_sql_tools")
    return "reads" if tool["meta"].get("ok") else "refused"


def expected(backend: str, sqlite: Outcome, postgresql: Outcome) -> Outcome:
    return sqlite if backend == "sqlite" else postgresql


def test_the_table_has_more_than_a_hundred_statements_each_with_a_reason_to_be_there() -> None:
    assert len(STATEMENTS) >= 100
    assert len({sql for sql, _, _ in STATEMENTS}) == len(STATEMENTS)


def test_a_chat_turn_asks_exactly_when_the_engine_reads_a_write(app: Flask, llm: FakeLLMServer, backend: str) -> None:
    _, user_id, client = seeded(app)
    wrong: list[tuple[str, Outcome, Outcome]] = []
    for sql, on_sqlite, on_pg in STATEMENTS:
        want = expected(backend, on_sqlite, on_pg)
        llm.queue(command_line(sql))
        before = memories(app, user_id)
        answer = client.post("/chat", json={"message": "do it"})
        assert answer.status_code == 200, (sql, answer.get_json())
        stored = answer.get_json()["messages"]
        found = outcome_of(stored)
        assert memories(app, user_id) == before, f"written without approval: {sql!r}"
        if found != want:
            wrong.append((sql, want, found))
            continue
        if found == "asks":
            question = stored[-1]
            approve = {
                "conversationId": answer.get_json()["session_id"],
                "toolCallId": question["meta"]["tool_call_id"],
                "toolName": "memory_sql",
                "targetField": "approval",
                "value": True,
            }
            ran = client.post("/api/ai/tool-result", json=approve)
            assert ran.status_code == 200, (sql, ran.get_json())
            result = next(m for m in ran.get_json()["messages"] if m["role"] == "memory_sql_tools")
            assert result["meta"]["ok"] and result["meta"]["approval"] == "approved", (sql, result)
            assert client.post("/api/ai/tool-result", json=approve).status_code == 409  # once only
    assert wrong == [], "\n".join(f"{want} expected, {found} found: {sql!r}" for sql, want, found in wrong)


def test_a_declined_write_writes_nothing(app: Flask, llm: FakeLLMServer) -> None:
    _, user_id, client = seeded(app)
    llm.queue("/memory_sql WITH a AS (SELECT 1) UPDATE memories SET importance = 9 WHERE true")
    before = memories(app, user_id)
    answer = client.post("/chat", json={"message": "do it"}).get_json()
    question = answer["messages"][-1]
    declined = client.post(
        "/api/ai/tool-result",
        json={
            "conversationId": answer["session_id"],
            "toolCallId": question["meta"]["tool_call_id"],
            "toolName": "memory_sql",
            "targetField": "approval",
            "value": False,
        },
    )
    assert declined.status_code == 200
    assert memories(app, user_id) == before


def mcp_call(app: Flask, token: str, sql: str) -> dict[str, Any]:
    endpoint = McpEndpoint(app, threads=2)
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_sql", "arguments": {"sql": sql}}}
    ).encode()

    sent = asgi_post(endpoint, token, body)
    return dict(json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")))


def test_direct_calls_run_or_refuse_as_the_engine_says_and_never_ask(
    app: Flask, llm: FakeLLMServer, backend: str
) -> None:
    token, user_id, client = seeded(app)
    wrong: list[tuple[str, str, Outcome, str]] = []
    for sql, on_sqlite, on_pg in STATEMENTS:
        want = expected(backend, on_sqlite, on_pg)
        before = memories(app, user_id)
        direct = client.post("/tools/memory_sql", json={"sql": sql})
        kind = (direct.get_json() or {}).get("kind")
        if (want == "refused") != (direct.status_code >= 400) or (want == "reads" and kind != "select"):
            wrong.append((sql, "POST /tools", want, f"{direct.status_code} {kind}"))
        if want == "asks" and kind != "update":
            wrong.append((sql, "POST /tools", want, f"{direct.status_code} {kind}"))
        answer = mcp_call(app, token, sql)["result"]
        if bool(answer.get("isError")) != (want == "refused"):
            wrong.append((sql, "/mcp", want, json.dumps(answer)[:200]))
        if want != "asks":
            assert memories(app, user_id) == before, f"a statement that is no write wrote: {sql!r}"
    assert wrong == [], "\n".join(f"{path}: {want} expected, got {got}: {sql!r}" for sql, path, want, got in wrong)


def test_over_v1_a_write_is_a_question_and_nothing_runs_before_yes(
    app: Flask, llm: FakeLLMServer, backend: str
) -> None:
    _, user_id, client = seeded(app)
    for sql, on_sqlite, on_pg in STATEMENTS[::7]:
        want = expected(backend, on_sqlite, on_pg)
        llm.queue(command_line(sql))
        before = memories(app, user_id)
        answer = client.post(
            "/v1/chat/completions", json={"model": "orchestrator", "messages": [{"role": "user", "content": "do it"}]}
        )
        assert answer.status_code == 200, (sql, answer.get_json())
        assert memories(app, user_id) == before, f"written without approval over /v1: {sql!r}"
        session = answer.headers["X-Session-Id"]
        stored = client.get(f"/sessions/{session}/messages").get_json()["messages"]
        assert outcome_of(stored) == want, (sql, stored)
        if want == "asks":
            text = answer.get_json()["choices"][0]["message"]["content"]
            assert "/memory_sql" in text, text  # the question shows the exact command
            declined = client.post(
                "/v1/chat/completions",
                json={"model": "orchestrator", "messages": [{"role": "user", "content": "no"}]},
                headers={"X-Session-Id": session},
            )
            assert declined.status_code == 200
            assert memories(app, user_id) == before, f"written after a no over /v1: {sql!r}"
