"""Issue 33 part 2 in SmolLM2's own tokens (its tokenizer, read from the GGUF CI installs, no
server): with a hundred more tools than the built-in commands, a first pass's prompt (system
prompt, demonstrations, the cut list, the user's message, in the model's ChatML template) stays
under 1,500 tokens for every case of ours, where listing every command would take several
times that."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from api.services import services_of
from evaluation.cases import load_cases
from pipeline.catalog import EVERYTHING
from pipeline.context import build_context
from pipeline.prompt import PromptBook
from providers import ChatMessage
from storage.messages import Message
from storage.roles import USER
from testing.llama_server import gguf_file, missing_packages
from tests.conftest import new_token
from tests.llama_support import LlamaServer, log_size, require
from tests.llm.test_decide_real import CACHED, product, turn
from tests.pipeline.test_prompt_listing import hundred_more, no_images
from tools.catalog import build_registry

pytestmark = [pytest.mark.llm]

CASES = Path(__file__).resolve().parents[2] / "examples" / "eval" / "cases.jsonl"
BUDGET = 1500


@pytest.fixture(scope="module")
def tokenizer() -> Iterator[Any]:
    reason = missing_packages()
    require(reason is None, reason or "")
    from llama_cpp import Llama

    yield Llama(model_path=str(gguf_file()), vocab_only=True, verbose=False)


def chatml_tokens(tokenizer: Any, messages: Sequence[ChatMessage]) -> int:
    """The prompt's length as SmolLM2's template writes it (`<|im_start|>role\\n…<|im_end|>`)."""
    text = "".join(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"
    return len(tokenizer.tokenize(text.encode(), add_bos=False, special=True))


def first_pass(book: PromptBook, asked: str, most: int) -> list[ChatMessage]:
    listing = book.listing(EVERYTHING, asked, most)
    return build_context(
        book.system_prompt(EVERYTHING, demos=True, cut=listing.cut),
        [Message(1, 1, USER, asked, "")],
        followup_turns=0,
        load_images=no_images,
        demos=book.demonstrations(EVERYTHING),
        listing=listing.message,
    )


def test_a_hundred_more_tools_keep_the_first_pass_under_1500_tokens(tokenizer: Any) -> None:
    book = PromptBook(hundred_more(build_registry()))
    asked = [next(c for r, c in reversed(case.messages) if r == "user") for case in load_cases(CASES)]
    counts = [chatml_tokens(tokenizer, first_pass(book, question, 30)) for question in asked]
    assert max(counts) < BUDGET, counts
    whole = chatml_tokens(tokenizer, first_pass(book, asked[0], 10_000))  # every command listed
    assert whole > 3 * BUDGET, whole


@pytest.mark.slow
def test_a_cut_list_keeps_the_servers_prefix_cache_over_the_history(
    make_app: Any, llama_server: LlamaServer, tokenizer: Any
) -> None:
    """The server's own count of what it found in its cache (`CACHED`): on a third turn, the
    system prompt, the demonstrations and the first exchange are all a prefix it holds, and it
    evaluates only what follows them (the second exchange, the new list, the new message)."""
    app = product(make_app, llama_server, prompt_commands=5, llm_decide="greedy")
    token = new_token(app)
    questions = ["Hello! Who are you?", "Say one word about the sea.", "And one about the sky?"]
    session_id = None
    for question in questions[:2]:
        frames = turn(app, token, question, session_id)
        session_id = frames[-1]["data"]["session_id"]
    offset = log_size(llama_server)
    turn(app, token, questions[2], session_id)
    with llama_server.log_path.open("rb") as log:
        log.seek(offset)
        [(hit, left), *_] = CACHED.findall(log.read().decode(errors="replace"))
    stored = (
        app.test_client()
        .get(f"/sessions/{session_id}/messages", headers={"Authorization": f"Bearer {token}"})
        .get_json()["messages"]
    )
    book = services_of(app).turns.prompts
    head = [
        ChatMessage(role="system", content=book.system_prompt(EVERYTHING, demos=True, cut=True)),
        *book.demonstrations(EVERYTHING),
        ChatMessage(role="user", content=stored[0]["content"]),
        ChatMessage(role="assistant", content=stored[1]["content"]),
    ]
    assert int(hit) >= 0.95 * chatml_tokens(tokenizer, head), (hit, left)
    listing = book.listing(EVERYTHING, questions[2], 5).message
    assert listing is not None
    tail = [
        ChatMessage(role="user", content=stored[2]["content"]),
        ChatMessage(role="assistant", content=stored[3]["content"]),
        listing,
        ChatMessage(role="user", content=questions[2]),
    ]
    assert int(left) <= 1.05 * chatml_tokens(tokenizer, tail) + 8, (hit, left)  # no more than what follows
