"""The scripted provider: replies from a JSON file, for demos and tests without a model.

A real product module, bound by the same contract as the HTTP providers (text or `None`
with a `FailureKind`). A script is a list consumed in order, or regex rules for demos. The
reply streams word by word, as a model's would, so that demos and tests exercise the same
live path (pieces, early stop, cancel) as a real server.
"""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import requests
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from llm.base import (
    Attempt,
    ChatMessage,
    FailureKind,
    Provider,
    ProviderConfig,
    ProviderError,
    ReplyFeed,
    Sleep,
    text_or_failure,
)

#: How the pipeline frames a tool result for the second pass (SPEC 6.3). The scripted
#: provider recognises it so demo scripts can answer tool results.
TOOL_RESULT_RE = re.compile(r"^Tool result for /([A-Za-z][A-Za-z0-9_]*)")

#: One streamed piece: a word with the whitespace around it, so the pieces join to the reply.
PIECE_RE = re.compile(r"\s*\S+\s*")


class UserRule(BaseModel):
    """Reply when the last user message (not a tool result) matches ``user`` (re.search, i)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    user: str
    reply: str


class AfterToolRule(BaseModel):
    """Reply when the last user message is the result of ``/<after_tool>``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    after_tool: str
    reply: str


class RuleScript(BaseModel):
    """Demo script: first matching rule wins, else ``default``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rules: list[UserRule | AfterToolRule] = Field(default_factory=list)
    default: str


_SCRIPT = TypeAdapter(list[str | None] | RuleScript)


class ScriptedProvider(Provider):
    """Replies read from a JSON file (``SCRIPTED_REPLIES``): a list consumed in order (tests),
    or regex rules (demos that run without any model). A product module, so it obeys the same
    contract as the HTTP providers: text or ``None`` with a ``FailureKind``."""

    name = "scripted"
    needs_key = False
    default_base_url = ""
    default_model = "scripted"

    def __init__(
        self,
        config: ProviderConfig,
        *,
        http: requests.Session | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        super().__init__(config, http=http, sleep=sleep)
        self.script = load_script(config.scripted_replies)
        self._patterns: list[tuple[re.Pattern[str] | None, UserRule | AfterToolRule]] = []
        if isinstance(self.script, RuleScript):
            for rule in self.script.rules:
                pattern = None
                if isinstance(rule, UserRule):
                    try:
                        pattern = re.compile(rule.user, re.IGNORECASE)
                    except re.error as exc:
                        raise ProviderError(f"SCRIPTED_REPLIES has a bad regex {rule.user!r}: {exc}") from exc
                self._patterns.append((pattern, rule))
        self._cursor = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int | None:
        """Replies left in a list script (``None`` for a rule script, which never runs out)."""
        if not isinstance(self.script, list):
            return None
        with self._lock:
            return len(self.script) - self._cursor

    def _attempt(self, messages: tuple[ChatMessage, ...], feed: ReplyFeed, grammar: str | None = None) -> Attempt:
        sent = sum(len(m.content.encode("utf-8")) for m in messages)
        if isinstance(self.script, list):
            with self._lock:
                if self._cursor >= len(self.script):
                    return Attempt(
                        failure=FailureKind.SCRIPT_EXHAUSTED,
                        detail=f"all {len(self.script)} replies used",
                        request_bytes=sent,
                    )
                reply = self.script[self._cursor]
                self._cursor += 1
        else:
            reply = self._match(messages)
        text = text_or_failure(reply)
        if isinstance(text, Attempt):
            return replace(text, request_bytes=sent)
        received = 0
        for piece in split_pieces(text):
            stop = feed.interruption()
            if stop is not None:
                return Attempt(failure=stop, detail=stop.value, request_bytes=sent, response_bytes=received)
            received += len(piece.encode("utf-8"))
            if not feed.put(piece):
                break
        return Attempt(request_bytes=sent, response_bytes=received, finish_reason="stop")

    def _match(self, messages: Sequence[ChatMessage]) -> str:
        assert isinstance(self.script, RuleScript)
        last = next((m.content for m in reversed(messages) if m.role == "user"), "")
        tool = TOOL_RESULT_RE.match(last)
        for pattern, rule in self._patterns:
            if tool is None and pattern is not None and pattern.search(last):
                return rule.reply
            if (
                tool is not None
                and isinstance(rule, AfterToolRule)
                and rule.after_tool.lstrip("/").lower() == tool.group(1).lower()
            ):
                return rule.reply.replace("{result}", quoted_result(last.partition("\n")[2]))
        return self.script.default


def split_pieces(reply: str) -> list[str]:
    """A reply as the pieces a model would stream: word by word, whitespace kept."""
    return PIECE_RE.findall(reply) or [reply]


def quoted_result(result: str) -> str:
    """The readable text of a tool-result block: its `> ` lines, unquoted and unescaped.

    Results reach a provider in the stored contract form (a `<details>` block with every
    line quoted and HTML-escaped); a demo reply wants just the text. Anything that is not
    in that form is returned as it is.
    """
    quoted = [line for line in result.splitlines() if line == ">" or line.startswith("> ")]
    if not quoted:
        return result
    return html.unescape("\n".join(line[2:] for line in quoted))


def load_script(path: str | None) -> list[str | None] | RuleScript:
    """Read and validate a reply script once; any problem is a developer error of one line
    (`python app.py` prints it and exits with 2, no traceback)."""
    if not path:
        raise ProviderError(
            "LLM_PROVIDER=scripted needs SCRIPTED_REPLIES, the path of a JSON reply file "
            "(see examples/scripted_demo.json)"
        )
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ProviderError(f"SCRIPTED_REPLIES file {path!r} does not exist") from exc
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ProviderError(f"SCRIPTED_REPLIES file {path!r} cannot be read: {reason}") from exc
    try:
        return _SCRIPT.validate_json(raw)
    except ValidationError as exc:
        raise ProviderError(f"SCRIPTED_REPLIES file {path!r} is invalid: {first_problem(exc)}") from exc


def first_problem(error: ValidationError) -> str:
    """A validation error in one line: where the first problem is, what it is, and how many more.

    A script is a list of replies or a rule object, so pydantic reports every union branch;
    the branch that got furthest (the longest location) is the one the author meant.
    """
    problems = error.errors(include_url=False)
    if problems[0]["type"] == "json_invalid":
        return f"not JSON ({problems[0].get('ctx', {}).get('error', problems[0]['msg'])})"
    deepest = max(problems, key=lambda problem: len(problem["loc"]))
    where = ".".join(str(part) for part in deepest["loc"][1:]) or "top level"
    message = " ".join(str(deepest["msg"]).split())
    more = f" ({len(problems) - 1} more)" if len(problems) > 1 else ""
    return f'{message} at {where}{more}; expected a JSON list of replies or {{"rules": [...], "default": ...}}'
