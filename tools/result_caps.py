"""How big a tool result may be (SPEC 12), and how a bigger one is cut down.

A tool result is stored once and then replayed into every later context of its session and
every page of its messages, so what one call returns must be bounded whatever the tool:
a web page's 2 MB title, 200 wide SQL rows, a judge's output. `tools/runner.py` passes every
result through `bounded` (so a result is small from the moment it exists, also for
`POST /tools/<name>`), and `tools/contract.py` applies the byte budget of the stored text.

- structured output (`meta.output`, the direct answer of `POST /tools/<name>`): at most
  `MAX_OUTPUT_BYTES` of JSON. Long strings are cut and end with `CUT_MARK`; long lists end
  with a marker item and long objects with a `"…"` member saying how many were left out, so
  the shape (keys, types of the items kept) stays what the tool's readers expect;
- the text shown to the model (`ToolResult.text`): at most `MAX_TEXT_CHARS` characters
  before the contract's escaping (whose own cap is bytes, `tools/contract.py`);
- an error message: at most `MAX_MESSAGE_CHARS` characters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import islice
from typing import Any

from foundation.text_safety import holds_surrogate, repair_value, replace_surrogates
from tools.base import ToolResult

MAX_CONTRACT_BYTES = 64 * 1024  # SPEC 12: the stored contract text
MAX_OUTPUT_BYTES = 256 * 1024  # SPEC 12: the structured output kept in `meta`
MAX_TEXT_CHARS = MAX_CONTRACT_BYTES  # escaping only grows text, so more could never be stored
MAX_MESSAGE_CHARS = 2_000
MAX_DEPTH = 32  # tool outputs are a few levels of pydantic models
CUT_MARK = "… [truncated]"
_ROUNDS = 16  # each round halves the string and item limits


@dataclass(frozen=True)
class Clipped:
    value: Any
    truncated: bool


def clip_text(text: str, max_chars: int, note: str = CUT_MARK) -> str:
    """`text` cut to `max_chars` characters, the cut marked with `note` on its own line."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n{note}"


def json_size(value: Any, budget: int) -> int | None:
    """Bytes of `json.dumps(value)` (ASCII, the form `meta` is stored in), or None as soon as
    it is certain to exceed `budget`: a huge value is never serialised just to be measured.
    A value nested deeper than `MAX_DEPTH` never fits (its readers recurse)."""
    total = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            if len(item) + 2 + total > budget:
                return None
            total += len(json.dumps(item))
        elif isinstance(item, (dict, list, tuple)):
            if depth >= MAX_DEPTH:
                return None
            total += 2 + 2 * max(0, len(item) - 1)  # brackets and ", "
            if isinstance(item, dict):
                total += 2 * len(item)  # ": "
                pending.extend((str(key), depth) for key in item)
                pending.extend((child, depth + 1) for child in item.values())
            else:
                pending.extend((child, depth + 1) for child in item)
        else:
            total += len(json.dumps(item, default=str))
        if total > budget:
            return None
    return total


class _Clipper:
    """One pass over a value with fixed limits; `nodes` bounds the work of the pass."""

    def __init__(self, max_chars: int, max_items: int, nodes: int) -> None:
        self.max_chars, self.max_items, self.nodes = max_chars, max_items, nodes

    def clip(self, value: Any, depth: int = 0) -> Any:
        self.nodes -= 1
        if isinstance(value, str):
            return value if len(value) <= self.max_chars else value[: self.max_chars] + CUT_MARK
        if depth >= MAX_DEPTH and isinstance(value, (dict, list, tuple)):
            return CUT_MARK
        if isinstance(value, dict):
            kept = {}
            for key, item in islice(value.items(), self.max_items):
                if self.nodes <= 0:
                    break
                kept[self.clip(str(key), depth)] = self.clip(item, depth + 1)
            if len(kept) < len(value):
                kept["…"] = f"[{len(value) - len(kept)} more entries truncated]"
            return kept
        if isinstance(value, (list, tuple)):
            items = []
            for item in islice(value, self.max_items):
                if self.nodes <= 0:
                    break
                items.append(self.clip(item, depth + 1))
            if len(items) < len(value):
                items.append(f"[{len(value) - len(items)} more items truncated]")
            return items
        return value


def clip_json(value: Any, max_bytes: int = MAX_OUTPUT_BYTES) -> Clipped:
    """`value` if its JSON fits in `max_bytes`, else a copy cut down until it does.

    Each round halves the longest string and the longest list or object allowed; the
    number of nodes a round visits is bounded by the budget (a node costs at least a byte),
    so cutting a 100 MB value costs about what keeping 256 KiB of it does.
    """
    if json_size(value, max_bytes) is not None:
        return Clipped(value, False)
    max_chars, max_items = max_bytes // 2, 1_000
    for _ in range(_ROUNDS):
        clipped = _Clipper(max_chars, max_items, nodes=max_bytes // 2).clip(value)
        if json_size(clipped, max_bytes) is not None:
            return Clipped(clipped, True)
        max_chars, max_items = max(16, max_chars // 2), max(1, max_items // 2)
    return Clipped({} if isinstance(value, dict) else None, True)


def bounded(result: ToolResult) -> ToolResult:
    """`result` within the caps above, every string valid Unicode (a tool may pass on a
    lone surrogate from a web page or a file; SQLite would refuse to store it)."""
    changes: dict[str, Any] = {}
    if result.output is not None:
        clipped = clip_json(result.output)
        if holds_surrogate(clipped.value):
            changes["output"] = repair_value(clipped.value)
        elif clipped.truncated:
            changes["output"] = clipped.value
    text = replace_surrogates(clip_text(result.text, MAX_TEXT_CHARS))
    if text != result.text:
        changes["text"] = text
    message = replace_surrogates(clip_text(result.message, MAX_MESSAGE_CHARS))
    if message != result.message:
        changes["message"] = message
    hint = replace_surrogates(clip_text(result.hint, MAX_MESSAGE_CHARS))
    if hint != result.hint:
        changes["hint"] = hint
    return result.model_copy(update=changes) if changes else result
