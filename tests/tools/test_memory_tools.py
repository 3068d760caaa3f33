"""`/memory_search` and `/remember` over `storage/search.py`, called through `run_tool`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.connection import Store
from storage.memories import add_memory
from storage.messages import add_message
from storage.search import fts_query, search_user_history
from storage.sessions import create_session
from tests.store_support import TwoUserStore
from tools.base import ToolContext, ToolResult
from tools.memory import MAX_HITS, MEMORY_SEARCH_TOOL, REMEMBER_TOOL
from tools.runner import run_tool

FILLER = [
    "the weather was mild",
    "we talked about cooking pasta",
    "a note on guitar strings",
    "bicycles need oil",
    "painting the fence green",
    "trains run late on sundays",
    "a book about owls",
    "tea or coffee in the morning",
    "planting tomatoes in spring",
    "the cat sleeps all day",
]


class World(TwoUserStore):
    """One temp database with two users; helpers to add rows for either."""

    def __init__(self, tmp_path: Path, store: Store | None = None) -> None:
        super().__init__(tmp_path, store=store)
        self.sessions = {user: create_session(self.conn, user).id for user in (self.alice, self.bob)}

    def ctx(self, user: int | None = None, **extra: Any) -> ToolContext:
        user = self.alice if user is None else user
        return ToolContext(
            conn=self.conn,
            database=self.database,
            settings=self.settings,
            user_id=user,
            session_id=self.sessions[user],
            **extra,
        )

    def say(self, content: str, *, role: str = "user", user: int | None = None, created_at: str | None = None) -> int:
        user = self.alice if user is None else user
        message = add_message(self.conn, session_id=self.sessions[user], user_id=user, role=role, content=content)
        if created_at is not None:
            self.conn.execute("UPDATE chat_messages SET created_at = ? WHERE id = ?", (created_at, message.id))
        return message.id

    def fill(self) -> None:
        for text in FILLER:
            self.say(text)

    def search(self, query: str, **ctx: Any) -> ToolResult:
        return run_tool(MEMORY_SEARCH_TOOL, {"query": query}, self.ctx(**ctx))

    def remember(self, fact: str, user: int | None = None, **extra: Any) -> ToolResult:
        return run_tool(REMEMBER_TOOL, {"fact": fact, **extra}, self.ctx(user))


@pytest.fixture
def world(tmp_path: Path, store: Store) -> Iterator[World]:
    """On both backends (`store` is parametrised: SQLite, PostgreSQL; tests/pg_support.py)."""
    world = World(tmp_path, store)
    yield world
    world.conn.close()


def hits(result: ToolResult) -> list[dict[str, Any]]:
    assert result.ok, result.message
    assert result.output is not None
    return result.output["hits"]


def hit_ids(result: ToolResult, source: str = "message") -> list[int]:
    return [hit["id"] for hit in hits(result) if hit["source"] == source]


# --------------------------------------------------------------------------- the query


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mars rover?", '"mars" OR "rover"'),
        ("Mars MARS mars", '"mars"'),
        ('say "hi" NEAR(x y)', '"say" OR "hi" OR "near" OR "x" OR "y"'),
        ("a AND b OR NOT c", '"a" OR "and" OR "b" OR "or" OR "not" OR "c"'),
        ("col:value -neg *star", '"col" OR "value" OR "neg" OR "star"'),
        ("?!*-:()\"'", None),
        ("", None),
    ],
)
def test_fts_query_quotes_every_term(text: str, expected: str | None) -> None:
    assert fts_query(text) == expected


def test_fts_query_caps_terms() -> None:
    query = fts_query(" ".join(f"w{i}" for i in range(40)))
    assert query is not None
    assert query.count(" OR ") == 15


# --------------------------------------------------------------------------- ranking


def test_row_matching_both_terms_ranks_first(world: World) -> None:
    world.fill()
    one = world.say("the mars mission was long")
    both = world.say("the mars rover drove far")
    other = world.say("a rover is a vehicle here")
    ids = hit_ids(world.search("mars rover"))
    assert ids[0] == both
    assert set(ids) == {one, both, other}


def test_rarer_term_outranks_common_term(world: World) -> None:
    world.fill()
    common = [world.say(f"apple pie number {i}") for i in range(6)]
    rare = world.say("banana pie number 9")
    ids = hit_ids(world.search("apple banana"))
    assert ids[0] == rare
    assert set(ids[1:]) == set(common)


def test_equal_scores_most_recent_first(world: World) -> None:
    world.fill()
    older = world.say("kiwi fruit salad", created_at="2026-01-01T00:00:00.000Z")
    newest = world.say("kiwi fruit salad", created_at="2026-03-01T00:00:00.000Z")
    middle = world.say("kiwi fruit salad", created_at="2026-02-01T00:00:00.000Z")
    assert hit_ids(world.search("kiwi")) == [newest, middle, older]


def test_equal_scores_and_timestamps_latest_id_first(world: World) -> None:
    world.fill()
    ids = [world.say("mango smoothie", created_at="2026-01-01T00:00:00.000Z") for _ in range(3)]
    assert hit_ids(world.search("mango")) == ids[::-1]


def test_at_most_max_hits(world: World) -> None:
    world.fill()
    for i in range(MAX_HITS + 4):
        world.say(f"papaya count {i}")
    assert len(hits(world.search("papaya"))) == MAX_HITS


def test_snippet_highlights_the_match(world: World) -> None:
    world.fill()
    world.say("Yesterday the Rover found water ice near the pole")
    add_memory(world.conn, world.alice, "The user loves the Curiosity rover")
    found = hits(world.search("rover"))
    assert len(found) == 2
    for hit in found:
        assert "**Rover**" in hit["snippet"] or "**rover**" in hit["snippet"]


def test_diacritics_and_case_are_folded(world: World) -> None:
    world.fill()
    message = world.say("We ate at the Café Zürich")
    assert hit_ids(world.search("cafe zurich")) == [message]
    assert hit_ids(world.search("CAFÉ")) == [message]


# --------------------------------------------------------------------------- scoping


def test_only_own_user_and_assistant_messages_and_memories(world: World) -> None:
    world.fill()
    mine_user = world.say("quokka facts from me")
    mine_assistant = world.say("quokka facts from the model", role="assistant")
    world.say("$ /web_search quokka", role="web_search_tools")
    world.say("quokka tool output", role="memory_search_tools")
    world.say("unknown command /quokka", role="router_tools")
    world.say("quokka system text", role="system")
    world.say("bob's quokka secret", user=world.bob)
    world.say("bob's quokka reply", role="assistant", user=world.bob)
    add_memory(world.conn, world.bob, "bob keeps a quokka")
    my_memory = add_memory(world.conn, world.alice, "alice likes the quokka").id
    turn = world.say("/memory_search quokka please")

    result = world.search("quokka", turn_message_id=turn)
    assert sorted(hit_ids(result)) == sorted([mine_user, mine_assistant])
    assert hit_ids(result, "memory") == [my_memory]
    assert {hit["role"] for hit in hits(result) if hit["source"] == "message"} == {"user", "assistant"}
    assert "bob" not in result.text

    without_turn = world.search("quokka")
    assert turn in hit_ids(without_turn)

    bobs = world.search("quokka", user=world.bob)
    assert all("bob" in hit["snippet"] for hit in hits(bobs))
    assert len(hits(bobs)) == 3


def test_search_direct_excludes_ids(world: World) -> None:
    first = world.say("walrus one")
    second = world.say("walrus two")
    found = search_user_history(world.database, world.conn, world.alice, "walrus", exclude_message_ids=[first])
    assert [hit.id for hit in found] == [second]


# --------------------------------------------------------------------------- hostile queries


@pytest.mark.parametrize(
    "query",
    [
        '"',
        '""',
        '"unterminated',
        "*",
        "pre*",
        "NEAR(",
        "NEAR(a b",
        "NEAR(a b, 2)",
        "-",
        "-quokka",
        ":",
        "content:quokka",
        "a:b:c",
        "AND",
        "OR",
        "NOT",
        "AND OR NOT",
        "quokka AND",
        "NOT quokka",
        "(",
        ")",
        "(quokka",
        "^quokka",
        "{content}: quokka",
        "quokka + wombat",
        "'; DROP TABLE users; --",
        "\\",
        "%",
        "_",
        "___",
        "ʼ",
        "\u0301",
        "x" * 500,
        " ".join(["quokka"] * 60),
    ],
)
def test_fts_syntax_never_raises(world: World, query: str) -> None:
    world.say("a quokka smiled")
    result = world.search(query)
    assert result.ok, result.message
    assert result.error_code is None


@pytest.mark.parametrize("query", ["?!", "***", '"-:()', "…", "— –"])
def test_query_without_words_has_a_friendly_answer(world: World, query: str) -> None:
    world.say("anything at all")
    result = world.search(query)
    assert hits(result) == []
    assert result.text.startswith("No past messages or memories match")
    assert query in result.text


@pytest.mark.parametrize(
    ("query", "code"), [("", "VALIDATION_FAILED"), ("   ", "VALIDATION_FAILED"), ("x" * 501, "VALIDATION_FAILED")]
)
def test_bad_query_is_a_validation_error(world: World, query: str, code: str) -> None:
    result = world.search(query)
    assert result.ok is False
    assert result.error_code == code
    assert "Usage: /memory_search" in result.hint


def test_unknown_field_is_refused(world: World) -> None:
    result = run_tool(MEMORY_SEARCH_TOOL, {"query": "x", "user_id": world.bob}, world.ctx())
    assert result.error_code == "VALIDATION_FAILED"


@pytest.fixture(scope="module")
def shared_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    world = World(tmp_path_factory.mktemp("memory"))
    world.fill()
    world.say("the quick brown fox jumps")
    add_memory(world.conn, world.alice, "fox facts are stored here")
    yield world
    world.conn.close()


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_search_never_fails_on_any_text(shared_world: World, query: str) -> None:
    result = shared_world.search(query)
    if result.ok:
        assert isinstance(result.output["hits"], list)  # type: ignore[index]
    else:
        assert result.error_code == "VALIDATION_FAILED", result.message


# --------------------------------------------------------------------------- rendering


def test_render_numbers_hits(world: World) -> None:
    world.fill()
    first = world.say("the narwhal tusk is a tooth", role="assistant")
    second = world.say("tell me about the narwhal")
    memory = add_memory(world.conn, world.alice, "User wants narwhal pictures").id
    result = world.search("narwhal")
    lines = result.text.split("\n")
    assert lines[0] == "3 matches for “narwhal” (best first):"
    assert [line.split(".", 1)[0] for line in lines[1:]] == ["1", "2", "3"]
    assert all("**narwhal**" in line for line in lines[1:])
    rendered = "\n".join(lines[1:])
    assert f"[assistant message #{first}, " in rendered
    assert f"[user message #{second}, " in rendered
    assert f"[memory #{memory}, " in rendered
    assert re.search(r"#\d+, \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\]", lines[1])


def test_render_collapses_newlines_in_snippets(world: World) -> None:
    world.say("line one about the okapi\nline two\r\nline three")
    result = world.search("okapi")
    assert len(result.text.split("\n")) == 2


# --------------------------------------------------------------------------- remember


def test_remember_stores_a_memory(world: World) -> None:
    result = world.remember("The user prefers metric units", importance=7)
    assert result.ok, result.message
    assert result.output is not None
    assert result.output["already_known"] is False
    assert result.text == f"Remembered as memory #{result.output['id']}: The user prefers metric units"
    row = world.conn.execute("SELECT * FROM user_memories WHERE id = ?", (result.output["id"],)).fetchone()
    assert (row["user_id"], row["content"], row["importance"]) == (world.alice, "The user prefers metric units", 7)
    assert hit_ids(world.search("metric"), "memory") == [result.output["id"]]


def test_remember_default_importance(world: World) -> None:
    result = world.remember("The user has a dog")
    assert result.ok
    row = world.conn.execute("SELECT importance FROM user_memories").fetchone()
    assert row[0] == 1


def test_remember_twice_is_already_known(world: World) -> None:
    first = world.remember("The user lives in Oslo")
    second = world.remember("  The user lives in Oslo  ")
    assert first.ok and second.ok
    assert second.output == {
        "id": first.output["id"],
        "content": "The user lives in Oslo",  # type: ignore[index]
        "already_known": True,
    }
    assert second.text.startswith("Already remembered as memory #")
    assert world.conn.execute("SELECT count(*) FROM user_memories").fetchone()[0] == 1


def test_same_fact_for_another_user_is_new(world: World) -> None:
    world.remember("Likes jazz")
    other = world.remember("Likes jazz", user=world.bob)
    assert other.output["already_known"] is False  # type: ignore[index]
    assert world.conn.execute("SELECT count(*) FROM user_memories").fetchone()[0] == 2


@pytest.mark.parametrize(
    ("payload", "ok"),
    [
        ({"fact": "x", "importance": 0}, False),
        ({"fact": "x", "importance": 11}, False),
        ({"fact": "x", "importance": -1}, False),
        ({"fact": "x", "importance": 1}, True),
        ({"fact": "x", "importance": 10}, True),
        ({"fact": "x", "importance": "5"}, True),
        ({"fact": "x", "importance": 2.5}, False),
        ({"fact": ""}, False),
        ({"fact": "   "}, False),
        ({"fact": "x" * 2001}, False),
        ({"fact": "x" * 2000}, True),
        ({}, False),
        ({"fact": "x", "user_id": 2}, False),
    ],
)
def test_remember_validation(world: World, payload: dict[str, Any], ok: bool) -> None:
    result = run_tool(REMEMBER_TOOL, payload, world.ctx())
    assert result.ok is ok, result.message
    if not ok:
        assert result.error_code == "VALIDATION_FAILED"
        assert "Usage: /remember <fact>" in result.hint
        assert world.conn.execute("SELECT count(*) FROM user_memories").fetchone()[0] == 0


def test_context_is_not_mutable(world: World) -> None:
    ctx = world.ctx()
    with pytest.raises(Exception):  # noqa: B017 - frozen dataclass
        ctx.user_id = world.bob  # type: ignore[misc]
    assert replace(ctx, user_id=world.bob).user_id == world.bob
