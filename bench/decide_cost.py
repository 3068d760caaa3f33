"""What the decision by mass (SPEC 6.11) costs on the server CI runs, and where it goes.

Starts SmolLM2-135M-Instruct on llama-cpp-python's server (`testing/llama_server.py`,
log-probabilities on) and sends, interleaved, on the first-pass prompt of the product's
default deployment (every command listed) and on the same prompt with the list cut to 8
(`PROMPT_COMMANDS`), each with its prefix already in the server's cache:

- the decision's reads as the product sends them (`pipeline/decide.py`): the first token with
  its 20 likeliest alternatives, and a scoring read per short-listed command (`/name ` held by
  a grammar, each token's log-probability);
- the same reads without `logprobs` (what generating those tokens costs by itself);
- the greedy first pass (what the decision is measured against), at most 512 tokens, as
  `bench/cards.py` runs it.

    .venv/bin/python bench/decide_cost.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from commands.grammar import exact_grammar, first_line_grammar  # noqa: E402
from pipeline.catalog import EVERYTHING  # noqa: E402
from pipeline.decide import SCORE_TOKENS, TOP_TOKENS  # noqa: E402
from pipeline.prompt import PromptBook  # noqa: E402
from testing.llama_server import LlamaProcess  # noqa: E402
from tools.catalog import build_registry  # noqa: E402

QUESTION = "What is the weather like in Oslo tomorrow?"
SHORTLIST = 3


def prompt(book: PromptBook, most: int) -> tuple[list[dict[str, str]], list[str], str]:
    """The first pass's messages, the short list's names and the first read's grammar."""
    listing = book.listing(EVERYTHING, QUESTION, most)
    messages = [{"role": "system", "content": book.system_prompt(EVERYTHING, demos=True, cut=listing.cut)}]
    messages += [{"role": m.role, "content": m.content} for m in book.demonstrations(EVERYTHING)]
    if listing.message is not None:
        messages.append({"role": "system", "content": listing.message.content})
    messages.append({"role": "user", "content": QUESTION})
    names = book.candidates(EVERYTHING, listing, QUESTION, SHORTLIST)
    return messages, names, first_line_grammar(listing.tools)


def post(url: str, messages: list[dict[str, str]], **body: Any) -> tuple[float, dict[str, Any]]:
    started = time.perf_counter()
    answer = requests.post(
        f"{url}/chat/completions",
        json={"messages": messages, "temperature": 0, "seed": 1234, "stream": False, **body},
        timeout=600,
    )
    answer.raise_for_status()
    return (time.perf_counter() - started) * 1000, answer.json()


def decision(url: str, messages: list[dict[str, str]], names: list[str], grammar: str, odds: bool) -> float:
    """The decision's 1 + len(names) reads, with or without log-probabilities: total ms."""
    extra: dict[str, Any] = {"logprobs": True, "top_logprobs": TOP_TOKENS} if odds else {}
    total, _ = post(url, messages, max_tokens=1, grammar=grammar, **extra)
    for name in names:
        extra = {"logprobs": True, "top_logprobs": 1} if odds else {}
        ms, _ = post(url, messages, max_tokens=SCORE_TOKENS, grammar=exact_grammar(f"/{name} "), **extra)
        total += ms
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    book = PromptBook(build_registry())
    shapes = {"every command listed": prompt(book, 30), "list cut to 8": prompt(book, 8)}
    with tempfile.TemporaryDirectory() as tmp:
        server = LlamaProcess.start(Path(tmp) / "server.log")
        try:
            url = server.base_url
            figures: dict[str, dict[str, list[float]]] = {name: {} for name in shapes}
            for _ in range(args.rounds):
                for name, (messages, names, grammar) in shapes.items():
                    post(url, messages, max_tokens=1)  # its prefix in the cache, as after a turn before
                    row = figures[name]
                    _, tokens = post(url, messages, max_tokens=1)
                    row.setdefault("prompt tokens", []).append(tokens["usage"]["prompt_tokens"])
                    row.setdefault("reads, as sent", []).append(decision(url, messages, names, grammar, True))
                    row.setdefault("reads, no logprobs", []).append(decision(url, messages, names, grammar, False))
                    ms, written = post(url, messages, max_tokens=512)
                    row.setdefault("greedy pass", []).append(ms)
                    row.setdefault("pass tokens", []).append(written["usage"]["completion_tokens"])
        finally:
            server.stop()
    print(
        "| prompt | tokens | decision's reads (1 + 3) | same, no logprobs | greedy first pass (tokens) | reads / pass |"
    )
    print("|---|---|---|---|---|---|")
    for name, row in figures.items():
        p50 = {key: statistics.median(values) for key, values in row.items()}
        share = p50["reads, as sent"] / p50["greedy pass"]
        print(
            f"| {name} | {p50['prompt tokens']:.0f} | {p50['reads, as sent']:,.0f} ms "
            f"| {p50['reads, no logprobs']:,.0f} ms | {p50['greedy pass']:,.0f} ms ({p50['pass tokens']:.0f}) "
            f"| {100 * share:.0f}% |"
        )


if __name__ == "__main__":
    main()
