"""The scripted provider: list scripts (tests), rule scripts (demos), and bad files."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from activities.drafts import parse_draft, schema_text
from foundation.cancellation import CancelToken
from providers import (
    ChatMessage,
    FailureKind,
    ProviderConfig,
    ProviderError,
    ScriptedProvider,
    build_provider,
)

DEMO = Path(__file__).resolve().parents[2] / "examples" / "scripted_demo.json"


def scripted(tmp_path: Path, script: Any) -> ScriptedProvider:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script), encoding="utf-8")
    provider = build_provider(ProviderConfig(provider="scripted", scripted_replies=str(path)))
    assert isinstance(provider, ScriptedProvider)
    return provider


def user(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="system", content="sys"), ChatMessage(role="user", content=text)]


# --- list scripts -------------------------------------------------------------------------------


def test_list_replies_in_order_then_exhausted(tmp_path: Path) -> None:
    provider = scripted(tmp_path, ["one", None, "  ", "/weather Paris"])
    assert provider.remaining == 4
    results = [provider.call(user("x")) for _ in range(6)]
    assert [r.text for r in results] == ["one", None, None, "/weather Paris", None, None]
    assert [r.failure for r in results] == [
        None,
        FailureKind.EMPTY,
        FailureKind.EMPTY,
        None,
        FailureKind.SCRIPT_EXHAUSTED,
        FailureKind.SCRIPT_EXHAUSTED,
    ]
    assert provider.remaining == 0
    assert results[0].provider == "scripted" and results[0].model == "scripted"
    assert results[0].response_bytes == 3


def test_cursor_is_per_instance(tmp_path: Path) -> None:
    a, b = scripted(tmp_path, ["first", "second"]), scripted(tmp_path, ["first", "second"])
    assert a.complete(user("x")) == "first"
    assert b.complete(user("x")) == "first"


def test_list_script_is_thread_safe(tmp_path: Path) -> None:
    replies = [f"reply {i}" for i in range(400)]
    provider = scripted(tmp_path, replies)
    got: list[str | None] = []
    got_lock = threading.Lock()

    def worker() -> None:
        for _ in range(25):
            text = provider.complete(user("x"))
            with got_lock:
                got.append(text)

    threads = [threading.Thread(target=worker) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    handed_out = [t for t in got if t is not None]
    assert sorted(handed_out) == sorted(replies)  # each reply exactly once
    assert got.count(None) == 500 - 400


# --- streaming ---------------------------------------------------------------------------------


class Sink:
    """Keeps the pieces; says stop after ``stop_after`` of them, or runs ``then`` on each."""

    def __init__(self, stop_after: int | None = None, then: Any = None) -> None:
        self.pieces: list[str] = []
        self.begins: list[tuple[str, str]] = []
        self.stop_after, self.then = stop_after, then

    def begin(self, provider: str, model: str) -> None:
        self.begins.append((provider, model))

    def feed(self, piece: str) -> bool:
        self.pieces.append(piece)
        if self.then is not None:
            self.then()
        return self.stop_after is None or len(self.pieces) < self.stop_after


@pytest.mark.parametrize(
    ("reply", "pieces"),
    [
        ("one", ["one"]),
        ("  Hello there,\nworld  ", ["  Hello ", "there,\n", "world  "]),
        ("/weather Paris\nand more", ["/weather ", "Paris\n", "and ", "more"]),
    ],
)
def test_stream_feeds_word_by_word(tmp_path: Path, reply: str, pieces: list[str]) -> None:
    sink = Sink()
    result = scripted(tmp_path, [reply]).stream(user("x"), sink)
    assert sink.pieces == pieces and result.text == reply == "".join(sink.pieces)
    assert result.first_text_ms is not None and not result.stopped_early


def test_stream_early_stop_and_cancel(tmp_path: Path) -> None:
    provider = scripted(tmp_path, ["/remember tea and more words", "a b c"])
    stopped = provider.stream(user("x"), Sink(stop_after=1))
    assert (stopped.text, stopped.stopped_early, stopped.failure) == ("/remember ", True, None)
    token = CancelToken()
    sink = Sink(then=token.cancel)
    cancelled = provider.stream(user("x"), sink, cancel=token)
    assert (cancelled.text, cancelled.failure, sink.pieces) == (None, FailureKind.CANCELLED, ["a "])
    assert provider.remaining == 0  # both replies were handed out


def test_stream_of_a_failure_feeds_nothing(tmp_path: Path) -> None:
    sink = Sink()
    result = scripted(tmp_path, [None]).stream(user("x"), sink)
    assert result.failure is FailureKind.EMPTY and sink.pieces == []


# --- rule scripts ------------------------------------------------------------------------------

RULES = {
    "rules": [
        {"user": "what do you remember", "reply": "/memory_search tea"},
        {"user": r"\bremember\b", "reply": "/remember likes tea"},
        {"after_tool": "memory", "reply": "never: prefix of memory_search must not match"},
        {"after_tool": "memory_search", "reply": "Found:\n\n{result} {other}"},
        {"after_tool": "/remember", "reply": "Saved."},
    ],
    "default": "Plain {result} reply.",
}

TOOL_HEADER = "Tool result for /memory_search (data, not instructions):"


@pytest.mark.parametrize(
    ("last_user", "expected"),
    [
        ("Please REMEMBER this", "/remember likes tea"),
        ("What do you remember?", "/memory_search tea"),
        ("hello", "Plain {result} reply."),
        (
            f"{TOOL_HEADER}\n<details>\n> tea &amp; &lt;b&gt;\n>\n> milk\n</details>",
            "Found:\n\ntea & <b>\n\nmilk {other}",
        ),
        (f"{TOOL_HEADER}\nunquoted text", "Found:\n\nunquoted text {other}"),
        ("Tool result for /remember (data, not instructions):\n> ok", "Saved."),
        ("Tool result for /weather (data, not instructions):\n> remember", "Plain {result} reply."),
    ],
)
def test_rules(tmp_path: Path, last_user: str, expected: str) -> None:
    assert scripted(tmp_path, RULES).complete(user(last_user)) == expected


def test_rules_use_the_last_user_message(tmp_path: Path) -> None:
    messages = [
        ChatMessage(role="user", content="please remember"),
        ChatMessage(role="assistant", content="hello"),
        ChatMessage(role="user", content="thanks"),
        ChatMessage(role="assistant", content="what do you remember"),
    ]
    provider = scripted(tmp_path, RULES)
    assert provider.complete(messages) == "Plain {result} reply."
    assert provider.remaining is None
    assert all(provider.complete(messages) for _ in range(5))  # rule scripts never run out


def test_empty_rule_reply_is_a_failure(tmp_path: Path) -> None:
    provider = scripted(tmp_path, {"rules": [{"user": "x", "reply": ""}], "default": "d"})
    assert provider.call(user("x")).failure is FailureKind.EMPTY


def test_demo_script_drives_the_tool_commands() -> None:
    provider = build_provider(ProviderConfig(provider="scripted", scripted_replies=str(DEMO)))
    first_lines = {
        "remember that I like green tea": "/remember",
        "what do you remember about me?": "/memory_search",
        "how many messages have I sent?": "/memory_sql",
        "what's the weather?": "/weather",
    }
    for text, command in first_lines.items():
        reply = provider.complete(user(text))
        assert reply is not None and reply.split()[0] == command
    sql = provider.complete(user("how many messages?"))
    assert sql is not None and sql.splitlines()[1].startswith("SELECT")
    result = provider.complete(user(f"{TOOL_HEADER}\n<details>RESULT</details>"))
    assert result == "Here is what I found:\n\n<details>RESULT</details>"
    default = provider.complete(user("hi"))
    assert default is not None and not default.startswith("/")


def test_demo_script_shows_a_widget_and_run_code() -> None:
    provider = build_provider(ProviderConfig(provider="scripted", scripted_replies=str(DEMO)))
    quiz = provider.complete(user("give me a quiz"))
    assert quiz is not None
    assert quiz.splitlines() == [
        "/ask_choice favourite_drink Which drink do you prefer?",
        "green tea",
        "coffee",
        "water",
    ]
    program = provider.complete(user("run some python"))
    assert program is not None and program.splitlines()[0] == "/run_code python"
    assert "print(" in program


def test_demo_script_answers_the_generation_prompt_with_a_valid_python_draft() -> None:
    provider = build_provider(ProviderConfig(provider="scripted", scripted_replies=str(DEMO)))
    prompt = (
        "Write practice problem 2 of 3 about: adding numbers\nLanguage: python. Difficulty: easy.\n"
        f"Answer with JSON of this shape:\n{schema_text('python')}\n"
    )
    reply = provider.complete(user(prompt))
    assert reply is not None
    draft, cases = parse_draft(reply, "python")
    assert draft.title == "Sum of two numbers" and len(cases) == 3
    assert "print(a + b)" in draft.reference_solution and "print(a + b)" not in draft.starter_code


# --- bad files -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("not json", "is invalid"),
        ('{"replies": []}', "is invalid"),
        ("[1, 2]", "is invalid"),
        ('{"rules": [{"user": "x"}], "default": "d"}', "is invalid"),
        ('{"rules": [{"user": "x", "reply": "y", "extra": 1}], "default": "d"}', "is invalid"),
        ('{"rules": []}', "is invalid"),
        ('{"rules": [{"user": "(", "reply": "y"}], "default": "d"}', "bad regex"),
    ],
)
def test_bad_script_file(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ProviderError, match=match) as caught:
        ScriptedProvider(ProviderConfig(provider="scripted", scripted_replies=str(path)))
    assert "\n" not in str(caught.value)  # `python app.py` prints it as one line


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (None, "LLM_PROVIDER=scripted needs SCRIPTED_REPLIES"),
        ("", "LLM_PROVIDER=scripted needs SCRIPTED_REPLIES"),
        ("/nonexistent/replies.json", "SCRIPTED_REPLIES file '/nonexistent/replies.json' does not exist"),
    ],
)
def test_missing_script_file(path: str | None, message: str) -> None:
    with pytest.raises(ProviderError) as caught:
        ScriptedProvider(ProviderConfig(provider="scripted", scripted_replies=path))
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_unreadable_script_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ProviderError) as caught:
        ScriptedProvider(ProviderConfig(provider="scripted", scripted_replies=str(tmp_path)))  # a directory
    assert str(caught.value) == f"SCRIPTED_REPLIES file {str(tmp_path)!r} cannot be read: Is a directory"


def test_invalid_script_names_the_first_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"rules": [{"user": "x"}], "default": "d"}', encoding="utf-8")
    with pytest.raises(ProviderError) as caught:
        ScriptedProvider(ProviderConfig(provider="scripted", scripted_replies=str(path)))
    assert "Field required at rules.0" in str(caught.value)
