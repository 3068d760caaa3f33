"""Surrogate code points: valid in a Python `str`, not in text.

JSON's `\\ud800` escapes (from a client's body or a provider's stream) give a Python string a
lone surrogate. It is harmless until the string is encoded as UTF-8, which SQLite, a file, a
subprocess or `json.dumps(ensure_ascii=False)` all do, and which then raises
`UnicodeEncodeError` far from where the text came in. Input from users is refused where it
arrives (`api/bounded_json.py`, `judge/files.py`); text from models and tools, which the
product must store anyway, is repaired with `replace_surrogates`.
"""

from __future__ import annotations

import re
from typing import Any

SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def has_surrogate(text: str) -> bool:
    """Whether `text` holds a surrogate code point (paired or not; neither is UTF-8)."""
    return not text.isascii() and SURROGATE.search(text) is not None


def replace_surrogates(text: str) -> str:
    """`text` as valid Unicode: an escaped pair (high then low) becomes its character, and
    every lone surrogate becomes U+FFFD. Text without surrogates is returned as it is."""
    if not has_surrogate(text):
        return text
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return SURROGATE.sub(REPLACEMENT, joined)


def holds_surrogate(value: Any) -> bool:
    """Whether any string in a JSON-like value (dict keys included) holds a surrogate.
    Iterative: a deep value cannot exhaust the stack."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if has_surrogate(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, (list, tuple)):
            pending.extend(item)
    return False


def repair_value(value: Any) -> Any:
    """A JSON-like value with `replace_surrogates` applied to every string (for values of
    bounded depth, such as a clipped tool output)."""
    if isinstance(value, str):
        return replace_surrogates(value)
    if isinstance(value, dict):
        return {replace_surrogates(str(key)): repair_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [repair_value(item) for item in value]
    return value
