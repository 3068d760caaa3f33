"""Decode one JSON request body within limits: nesting depth, item count, valid Unicode.

Python's `json` parser recurses once per level of nesting and raises `RecursionError` (not
`ValueError`) around a thousand levels, which Werkzeug's `get_json(silent=True)` does not
catch: a body of a few thousand `[` answered 500 on every endpoint. A JSON string may also
spell a lone surrogate (`"\\ud800"`): valid JSON, but not text, and it crashed the first
place that encoded it (a file for the judge, SQLite). So the limits are checked before and
right after parsing, here, for every body:

1. A structural pre-scan on the raw bytes, at C speed (regular expressions and
   `bytes.translate`, no Python loop per byte): string literals are dropped; the separators
   and brackets left bound the number of values, and the depth is bounded by removing the
   innermost `[]`/`{}` pairs `max_depth` times. Nothing is parsed before both hold, so the
   parser never recurses deeper than `max_depth` nor builds more than `max_items` values.
2. The body must be UTF-8 (RFC 8259 section 8.1).
3. `json.loads` on the decoded text.
4. Every string (keys too) is checked for surrogate code points, which only `\\u` escapes
   can produce; the walk is iterative and bounded by step 1's limits.

Errors are values (`Rejected` with a code and a message that says what to fix); the caller
decides how to answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from foundation.text_safety import holds_surrogate

MAX_DEPTH = 64  # levels of arrays/objects; no body of this API needs more than a handful
MAX_ITEMS = 20_000  # values: separators (`,` `:`) plus containers, all levels together

MALFORMED = "malformed"
TOO_DEEP = "too_deep"
TOO_MANY_ITEMS = "too_many_items"
NOT_UNICODE = "not_unicode"

# A string literal, matched possessively so that matching stays linear; an unterminated
# string runs to the end of the body (the parser then reports it), so the scan never
# restarts inside a string.
_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"?', re.DOTALL)
_KEEP = frozenset(b"[]{},:")
_NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in _KEEP)
_INNERMOST = re.compile(rb"\[\]|\{\}")


@dataclass(frozen=True)
class Limits:
    max_depth: int = MAX_DEPTH
    max_items: int = MAX_ITEMS


@dataclass(frozen=True)
class Decoded:
    value: Any


@dataclass(frozen=True)
class Rejected:
    code: str  # MALFORMED, TOO_DEEP, TOO_MANY_ITEMS or NOT_UNICODE
    message: str


def decode(data: bytes | str, limits: Limits = Limits()) -> Decoded | Rejected:
    """The body's JSON value, or why it was refused."""
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data
    refused = check_structure(raw, limits)
    if refused is not None:
        return refused
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        return Rejected(MALFORMED, f"the body is not UTF-8 (byte {error.start}); send JSON encoded as UTF-8")
    try:
        value = json.loads(text)
    except ValueError as error:  # JSONDecodeError, and the int-digits limit
        return Rejected(MALFORMED, f"the body is not valid JSON: {error}")
    except RecursionError:  # unreachable after the depth check; kept so it can never be a 500
        return _too_deep(limits)
    if holds_surrogate(value):
        return Rejected(
            NOT_UNICODE,
            "a string in the JSON body holds a lone surrogate (an unpaired \\ud800-\\udfff "
            "escape), which is not text; send valid Unicode",
        )
    return Decoded(value)


def check_structure(raw: bytes, limits: Limits) -> Rejected | None:
    """Depth and item count from the raw bytes, before anything is parsed.

    Items are the separators (`,` `:`) plus the containers, so a body within the limit holds
    at most `max_items` brackets pairs, and the `max_depth` passes that each drop the
    innermost pairs run over a few kilobytes.
    """
    # A string follows `[`, `{`, `,` or `:` (or is the whole body), so an acceptable body has
    # at most `max_items + 1` of them: stop replacing after one more.
    stripped, strings = _STRING.subn(b"", raw, count=limits.max_items + 2)
    if strings > limits.max_items + 1:
        return _too_many(limits)
    structure = stripped.translate(None, _NOT_STRUCTURE)
    brackets = structure.translate(None, b",:")
    opened = brackets.count(b"[") + brackets.count(b"{")
    if opened * 2 != len(brackets):
        return Rejected(MALFORMED, "the body is not valid JSON: its brackets do not match")
    if re.search(rb"[\[{]{%d}" % (limits.max_depth + 1), brackets):
        return _too_deep(limits)
    items = len(structure) - len(brackets) + opened
    if items > limits.max_items:
        return _too_many(limits)
    for _ in range(limits.max_depth):
        if not brackets:
            return None
        brackets = _INNERMOST.sub(b"", brackets)
    if not brackets:
        return None
    if b"[}" in brackets or b"{]" in brackets:
        return Rejected(MALFORMED, "the body is not valid JSON: its brackets do not match")
    return _too_deep(limits)


def _too_many(limits: Limits) -> Rejected:
    return Rejected(TOO_MANY_ITEMS, f"the JSON body holds more than {limits.max_items} values; send less at once")


def _too_deep(limits: Limits) -> Rejected:
    return Rejected(TOO_DEEP, f"the JSON body is nested deeper than {limits.max_depth} levels; send a flatter body")
