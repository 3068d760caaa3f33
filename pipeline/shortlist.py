"""The few commands that best match a user's words (issue 33, `COMMAND_SHORTLIST`).

A small model picks a command far better from three candidates than from fifteen, and every
candidate the decision by mass scores is one more read (`pipeline/decide.py`). So the
commands a first pass scores are cut to the `k` whose text best matches the user's message,
by BM25 (Robertson and Zaragoza's Okapi weighting: a word counts more when it is rare among
the commands, and a long description does not win by length) over each command's name,
description, usage, example and example request. The prompt still lists every offered
command, unchanged from turn to turn, so a server's prefix cache keeps holding it: the list
cut into the prompt itself cost the cache (a first pass of 31 s against 4.5 s, bench/README.md).

Built once per command list (`Shortlister`), then a query costs a pass over its words.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tools.base import Tool

K1 = 1.2  # how fast a repeated word stops adding (the usual Okapi value)
B = 0.75  # how much a long command text is discounted
WORD = re.compile(r"[a-z0-9]+")
# Words every request has: matching on them would rank by chance.
STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "my",
        "of",
        "on",
        "or",
        "please",
        "the",
        "this",
        "to",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


def words(text: str) -> list[str]:
    """Lowercase words, `snake_case` names split, without the stop words."""
    return [word for word in WORD.findall(text.lower().replace("_", " ")) if word not in STOP_WORDS]


def command_text(tool: Tool[Any, Any]) -> str:
    binding = tool.command
    assert binding is not None
    return " ".join((binding.name, tool.description, binding.usage, binding.example, binding.request))


class Shortlister:
    """BM25 over one command list; `best(query, k)` is the k best names, the list's order on ties."""

    def __init__(self, catalog: Sequence[Tool[Any, Any]]) -> None:
        self.names = [tool.command.name for tool in catalog if tool.command is not None]
        self.terms = [Counter(words(command_text(tool))) for tool in catalog if tool.command is not None]
        lengths = [sum(terms.values()) for terms in self.terms]
        self.mean_length = (sum(lengths) / len(lengths)) if lengths else 0.0
        self.lengths = lengths
        found = Counter(word for terms in self.terms for word in terms)
        count = len(self.terms)
        self.idf = {word: math.log(1 + (count - n + 0.5) / (n + 0.5)) for word, n in found.items()}

    def scores(self, query: str) -> list[float]:
        asked = set(words(query))
        result = []
        for terms, length in zip(self.terms, self.lengths, strict=True):
            score = 0.0
            norm = K1 * (1 - B + B * length / self.mean_length) if self.mean_length else K1
            for word in asked:
                tf = terms.get(word, 0)
                if tf:
                    score += self.idf[word] * tf * (K1 + 1) / (tf + norm)
            result.append(score)
        return result

    def best(self, query: str, k: int) -> list[str]:
        """The `k` names that best match `query` (all of them when `k` is 0 or covers the list)."""
        if k <= 0 or k >= len(self.names):
            return list(self.names)
        scores = self.scores(query)
        order = sorted(range(len(self.names)), key=lambda index: -scores[index])  # stable: the list's order on ties
        return [self.names[index] for index in order[:k]]
