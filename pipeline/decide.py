"""Deciding a first pass by probability mass (SPEC 6.11, `LLM_DECIDE`).

Greedy decoding writes `/` whenever it is the single most likely first token, even when prose
tokens together are far more likely: on a small model's plain questions P(`/`) is about 0.3,
and the greedy text is a command anyway. So before it writes, a first pass may read:

1. the first token's probabilities on the pass's own context (one token, `TOP_TOKENS`
   alternatives): a command only when the tokens that start one (`/`, ` /`…) carry more than
   `LLM_DECIDE_THRESHOLD` of the probability;
2. for a command, each offered command's score, the mean per-token log-probability of
   `/name ` held to exactly that text by a grammar (a short read each, on the same context, so
   a server's prefix cache answers the prompt once): the best score is the command;
3. the pass then writes, held by a grammar to that command (its arguments are the model's) or
   to prose.

The reads are the pass's (their text is never shown, stored or sent on) and bounded: one, plus
one per offered command, each within what the turn may still wait for its model (`LLM_WAIT_S`). A provider that gives no log-probabilities (learnt from its first
answer, `Provider.offers`), a server that takes no grammar, a circuit that is not closed, or
a read that fails leave the pass as it was: greedy, as sampled. Why this and not the
provider's native function calling: bench/README.md, "Choosing a model" in the README.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from commands.grammar import exact_grammar, first_line_grammar, prose_grammar
from foundation.cancellation import CancelToken
from providers import ChatMessage, FallbackChain, Odds, Provider, TurnWait
from tools.base import Tool

TOP_TOKENS = 20  # alternatives read for the first token: a command's start is among them when it matters
SCORE_TOKENS = 8  # `/name ` is a few tokens; the grammar ends the read at its last one
Mode = Literal["auto", "greedy", "mass"]


@dataclass(frozen=True)
class MassDecision:
    """What the reads decided for one first pass."""

    command: str | None  # the chosen command's name; None: prose
    mass: float  # the first token's probability on tokens that start a command
    scores: dict[str, float]  # each scored command's mean per-token log-probability of `/name `
    reads: int
    elapsed_ms: float
    grammar: str | None  # what holds the pass to the decision (None: the server takes no grammar)


def mass_decider(chain: FallbackChain, mode: Mode) -> Provider | None:
    """The provider whose probabilities decide the pass, or None for the greedy path: the
    chain's first provider, asked only when its circuit is closed, when it may give
    log-probabilities (`auto`: only where a read bills nothing)."""
    if mode == "greedy":
        return None
    provider = chain.primary
    states = chain.breaker_states()
    if states and states[0].state != "closed":
        return None
    if provider.offers.odds is False or (mode == "auto" and provider.billed_per_call):
        return None
    return provider


def command_mass(odds: Odds) -> float:
    """The probability of the first token's listed alternatives that start a command."""
    first = odds.tokens[0]
    alternatives = first.top or ((first.token, first.logprob),)
    return sum(math.exp(logprob) for token, logprob in alternatives if token.lstrip(" \t").startswith("/"))


def mean_score(odds: Odds) -> float:
    return sum(token.logprob for token in odds.tokens) / len(odds.tokens)


def decide_by_mass(
    provider: Provider,
    context: Sequence[ChatMessage],
    catalog: Sequence[Tool[Any, Any]],
    *,
    candidates: Sequence[str],
    threshold: float,
    cancel: CancelToken,
    wait: TurnWait | None = None,
) -> MassDecision | None:
    """Read, then decide among `candidates` (names of `catalog`'s commands: the short list);
    None when a read gave nothing to decide by (the pass stays greedy)."""
    started = time.perf_counter()

    def read(tokens: int, top: int, grammar: str) -> Odds | None:
        """One read within what the turn may still wait (`LLM_WAIT_S`); None when it may not."""
        if wait is not None and wait.exhausted():
            return None
        odds = provider.read_odds(
            context,
            tokens=tokens,
            top=top,
            grammar=grammar,
            cancel=cancel,
            wait_s=None if wait is None else wait.remaining_s(),
        )
        if wait is not None:
            wait.spend_s(odds.elapsed_ms / 1000)
        return odds if odds.ok else None

    first = read(1, TOP_TOKENS, first_line_grammar(catalog))
    if first is None:
        return None
    takes_grammar = provider.offers.grammar is not False
    mass = command_mass(first)
    named = list(candidates)
    if mass <= threshold or not named:
        grammar = prose_grammar() if takes_grammar else None
        return MassDecision(None, mass, {}, 1, _ms(started), grammar)
    if not takes_grammar:  # no grammar to score a name with, nor to hold the pass to it: as sampled
        return None
    scores: dict[str, float] = {}
    for name in named:
        odds = read(SCORE_TOKENS, 1, exact_grammar(f"/{name} "))
        if odds is None or provider.offers.grammar is False:
            return None
        scores[name] = mean_score(odds)
    best = max(scores, key=lambda name: scores[name])
    chosen = [tool for tool in catalog if tool.command is not None and tool.command.name == best]
    grammar = first_line_grammar(chosen, prose=False)
    return MassDecision(best, mass, scores, 1 + len(scores), _ms(started), grammar)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
