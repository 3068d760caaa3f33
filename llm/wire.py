"""What the wire formats share: the reading of one JSON message into a `Parsed` value.

Each format (`llm/openai_wire.py`, `llm/ollama_wire.py`) says where the text, the finish
reason and the token counts sit in its messages; the rules for everything else (what is
malformed, how an error body reads, how counts are completed) are the same for all, so they
live here once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from llm.base import Attempt, FailureKind


@dataclass(frozen=True)
class Parsed:
    """What one JSON message of the server says: a whole reply, or one chunk of a stream."""

    content: Any = None  # the text; anything but a str (or None) is classified as malformed
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    end: bool = False  # the stream's terminator ([DONE], "done": true)
    failure: Attempt | None = None


def decode_json(raw: bytes | str) -> tuple[Any, bool]:
    """``(value, True)`` when ``raw`` is JSON, ``(None, False)`` otherwise (nested too deeply
    for the parser's recursion included: a reply is never that deep)."""
    try:
        return json.loads(raw), True
    except (ValueError, RecursionError):
        return None, False


def malformed(detail: str) -> Parsed:
    return Parsed(failure=Attempt(failure=FailureKind.MALFORMED, detail=detail))


def error_message(data: Any) -> str:
    """The human part of an error body: Ollama ``{"error": "..."}`` or OpenAI-style
    ``{"error": {"message": "...", "code": ...}}``."""
    if not isinstance(data, dict):
        return ""
    error = data.get("error")
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code")
        parts = [str(p) for p in (code, message) if p is not None and p != ""]
        return ": ".join(parts)
    return ""


def refused(data: Any, not_an_object: str) -> Parsed | None:
    """Why a body or a stream message cannot be read: it is no JSON object (`not_an_object`
    says which), or it carries an upstream ``error``; None when it can be."""
    if not isinstance(data, dict):
        return malformed(not_an_object)
    return upstream_error(data)


def upstream_error(data: dict[str, Any]) -> Parsed | None:
    """A 200 body or stream chunk that carries an ``error`` object (OpenRouter forwards
    upstream failures so, also in the middle of a stream)."""
    if data.get("error"):
        detail = error_message(data) or "error in 200 response"
        return Parsed(failure=Attempt(failure=FailureKind.UPSTREAM_ERROR, detail=detail))
    return None


def token_counts(**counts: Any) -> dict[str, int] | None:
    """Keep the integer counts; add the total when the server gave only its parts."""
    usage = {k: v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}
    if "total_tokens" not in usage and {"prompt_tokens", "completion_tokens"} <= set(usage):
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage or None


def string(value: Any) -> str | None:
    return value if isinstance(value, str) else None
