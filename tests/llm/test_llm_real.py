"""Against a real engine nobody here wrote: llama.cpp's OpenAI-compatible server
(`llama-cpp-python[server]`) serving SmolLM2-135M-Instruct (tests/llama_support.py).

These tests check wire format, streaming, early stop and cancellation, never the wording of
a 135M model: prompts ask for long, harmless answers ("count to 50") and every assertion is
about structure. Three layers:

a. the raw protocol, with `requests` (what our provider code relies on);
b. our provider layer (`providers.build_provider`) against it;
c. our server (`python app.py`), the product, end to end against it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from config.settings import Settings
from foundation.cancellation import CancelToken
from llm.base import ChatMessage, Completion, FailureKind, ProviderConfig
from providers import FallbackChain, build_provider
from testing.llama_server import free_port
from testing.waiting import wait_until
from tests.llama_support import LlamaServer, finished_generations, log_size
from tests.process_support import stop_process, wait_until_serving

pytestmark = [pytest.mark.slow, pytest.mark.llm]

ROOT = Path(__file__).resolve().parents[2]
SETTING_NAMES = {name.upper() for name in Settings.model_fields}
TIMEOUT_S = 150  # the first product turn evaluates ~1,650 system-prompt tokens (10-45 s on 2 busy cores)
# SmolLM2-135M with llama.cpp's default sampling seed answers the same prompt the same way:
# "count to 50" gets ~10 tokens without our system prompt, the dragon story 700-1,300 tokens
# (tens of seconds: long enough to stop or cancel in the middle), the days ~70 tokens.
SHORT = "Count from 1 to 50 separated by spaces."
LONG = "Write a long story about a dragon and a knight."
STORY_TOKENS = 200  # LONG draws 700+ tokens; SHORT about 100 at most (11-27 seen)
PROMPTS = [  # for the product's streamed turns, which carry our system prompt
    "List the days of the week, one per line.",
    "Write three short sentences about the sea.",
    "Name five colours, separated by commas.",
    SHORT,
]
FAR_AWAY = "http://127.0.0.1:9"  # where the product's outbound tools go (nothing listens)
# Loaded into the product's process: any socket connection to a non-loopback address fails, as
# in this process (tests/conftest.py), whatever command a real model happens to write.
NETWORK_GUARD = "from testing.network_guard import install\ninstall()\n"


# SSE reading ----------------------------------------------------------------------------------


@dataclass
class Frame:
    event: str = ""  # no `event:` line (SSE's default "message")
    data: str = ""
    id: str | None = None
    comments: list[str] = field(default_factory=list)
    at: float = 0.0  # time.monotonic() when the frame was complete

    def json(self) -> Any:
        return json.loads(self.data)


def frames(response: requests.Response) -> Iterator[Frame]:
    """SSE frames as they arrive (comments kept, so keep-alives and `: ts=` lines show)."""
    frame = Frame()
    data: list[str] = []
    started = False
    for line in response.iter_lines(chunk_size=256, decode_unicode=True):
        if line == "":
            if started:
                frame.data = "\n".join(data)
                frame.at = time.monotonic()
                yield frame
            frame, data, started = Frame(), [], False
            continue
        started = True
        if line.startswith(":"):
            frame.comments.append(line[1:].strip())
            continue
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "data":
            data.append(value)
        elif key == "event":
            frame.event = value
        elif key == "id":
            frame.id = value
    if started:
        frame.data = "\n".join(data)
        frame.at = time.monotonic()
        yield frame


# a. the raw protocol --------------------------------------------------------------------------


def chat_body(server: LlamaServer, text: str, **extra: Any) -> dict[str, Any]:
    return {"model": server.model, "messages": [{"role": "user", "content": text}], **extra}


def test_raw_stream_is_sse_delta_chunks_then_done(llama_server: LlamaServer) -> None:
    """`stream: true` on llama.cpp's /v1/chat/completions (llama-cpp-python 0.3.36), observed:

    - 200 at once, `Content-Type: text/event-stream; charset=utf-8`, `Transfer-Encoding:
      chunked` (no Content-Length), `Cache-Control: no-store`, `X-Accel-Buffering: no`,
      `Connection: keep-alive`; served by uvicorn + sse-starlette with LF line ends.
    - every event is one bare `data: <json>` line (no `event:`, no `id:`), then a blank line.
    - the first chunk is `delta: {"role": "assistant"}` with no content; then one chunk per
      token, `delta: {"content": "..."}` (a token may be a bare space or newline); the last
      JSON chunk has an empty delta and `finish_reason` "stop" (or "length"); then `data: [DONE]`.
    - every chunk is `object: "chat.completion.chunk"` with one `id` ("chatcmpl-<uuid>"), one
      `created`, `logprobs: null`, and `model` as sent.
    - no `usage` in any chunk, even with `stream_options: {"include_usage": true}` (the
      non-stream answer has it): a streamed `Completion.usage` is None with this engine.
    - keep-alive: a `: ping - <UTC timestamp>` comment frame every 15 s while a stream is
      open, also in the middle of generation (seen at 15.0 s and 30.0 s of a 38 s answer); a
      reader must skip comment frames.
    - chunks are sent as they are generated (first chunk after ~0.1-2 s, the rest follow), so
      the first content chunk arrives before `[DONE]`.
    """
    started = time.monotonic()
    with requests.post(
        f"{llama_server.base_url}/chat/completions",
        stream=True,
        timeout=TIMEOUT_S,
        json=chat_body(llama_server, SHORT, stream=True),
    ) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers.get("Transfer-Encoding") == "chunked"
        assert "Content-Length" not in response.headers
        received = list(frames(response))
    assert received, "no SSE frame"
    assert all(frame.event == "" and frame.id is None for frame in received)
    assert received[-1].data == "[DONE]"
    chunks = [frame.json() for frame in received[:-1] if frame.data]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk["id"] for chunk in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert {chunk["model"] for chunk in chunks} == {llama_server.model}
    contents = [chunk["choices"][0]["delta"].get("content") for chunk in chunks]
    pieces = [piece for piece in contents if piece]
    assert len(pieces) >= 3, f"expected several content chunks, got {contents!r}"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["delta"] == {}
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in chunks[:-1])
    assert not any(chunk.get("usage") for chunk in chunks), "usage now appears in stream chunks: update the docstring"
    first_piece = next(
        frame.at for frame in received[:-1] if frame.data and frame.json()["choices"][0]["delta"].get("content")
    )
    assert first_piece < received[-1].at, "the chunks arrived all at once"
    assert first_piece - started < TIMEOUT_S


def read_all(reader: Iterator[Frame]) -> tuple[list[Frame], bool]:
    """The frames left, and whether the HTTP response ended abruptly (no final chunk)."""
    received: list[Frame] = []
    try:
        for frame in reader:
            received.append(frame)
    except requests.exceptions.ChunkedEncodingError:
        return received, True
    return received, False


def test_raw_a_second_request_cuts_a_running_stream_short(llama_server: LlamaServer) -> None:
    """The engine serves one request at a time, and by default (`interrupt_requests=True`) a
    request that arrives while a stream is running ENDS that stream, streamed or not: after
    its next token it sends `data: [DONE]` (no chunk ever had a `finish_reason`) and then,
    mostly but not always (twice in CI the response ended cleanly on a loaded machine), drops
    the HTTP response without its final zero-length chunk (uvicorn logs "ASGI callable returned
    without completing response"; requests raises ChunkedEncodingError "Response ended
    prematurely" after the `[DONE]` frame). The newcomer is then served at once.
    So with two users on one llama.cpp server an answer can stop mid-sentence: a client must
    stop reading at `[DONE]`, and only the missing `finish_reason` tells it was cut."""
    url = f"{llama_server.base_url}/chat/completions"
    with requests.post(url, stream=True, timeout=TIMEOUT_S, json=chat_body(llama_server, LONG, stream=True)) as first:
        assert first.status_code == 200
        reader = frames(first)
        for frame in reader:  # wait until the story is being generated
            if frame.data and frame.data != "[DONE]" and frame.json()["choices"][0]["delta"].get("content"):
                break
        second = requests.post(url, timeout=TIMEOUT_S, json=chat_body(llama_server, SHORT))
        rest, _abrupt_or_clean = read_all(reader)
    assert second.status_code == 200 and second.json()["choices"][0]["message"]["content"]
    assert rest and rest[-1].data == "[DONE]"
    chunks = [frame.json() for frame in rest[:-1] if frame.data]
    assert len(chunks) < 50, "the story ran on instead of being cut short"
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in chunks)


def test_raw_non_stream_is_one_chat_completion(llama_server: LlamaServer) -> None:
    """Without `stream`: one JSON `chat.completion` (Content-Type application/json, with a
    Content-Length), `choices[0].message = {"role": "assistant", "content": str}`,
    `finish_reason`, and `usage` {prompt_tokens, completion_tokens, total_tokens}."""
    response = requests.post(
        f"{llama_server.base_url}/chat/completions", timeout=TIMEOUT_S, json=chat_body(llama_server, SHORT)
    )
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    data = response.json()
    assert data["object"] == "chat.completion"
    assert data["model"] == llama_server.model
    message = data["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert isinstance(message["content"], str) and message["content"].strip()
    assert data["choices"][0]["finish_reason"] in ("stop", "length")
    usage = data["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0


def test_raw_models_list_and_any_model_name(llama_server: LlamaServer) -> None:
    """`GET /v1/models` (what our provider's probe and /health call): `{"object": "list",
    "data": [{"id", "object": "model", "owned_by": "me", "permissions": []}]}`; the id is the
    --model path unless --model_alias is given. A one-model server answers whatever `model`
    a request names, so a wrong LLM_MODEL goes unnoticed with this engine."""
    data = requests.get(f"{llama_server.base_url}/models", timeout=10).json()
    assert data["object"] == "list"
    assert [entry["id"] for entry in data["data"]] == [llama_server.model]
    assert data["data"][0]["object"] == "model"
    response = requests.post(
        f"{llama_server.base_url}/chat/completions",
        timeout=TIMEOUT_S,
        json={**chat_body(llama_server, SHORT), "model": "no-such-model"},
    )
    assert response.status_code == 200 and response.json()["object"] == "chat.completion"


# b. our provider layer ------------------------------------------------------------------------


class Sink:
    """Collects what `Provider.stream` feeds; after `stop_after` pieces `feed` answers False."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.begun: list[tuple[str, str]] = []
        self.pieces: list[str] = []
        self.first = threading.Event()
        self.first_at = 0.0

    def begin(self, provider: str, model: str) -> None:
        self.begun.append((provider, model))

    def feed(self, piece: str) -> bool:
        self.pieces.append(piece)
        if not self.first.is_set():
            self.first_at = time.monotonic()
            self.first.set()
        return self.stop_after is None or len(self.pieces) < self.stop_after


def provider_for(server: LlamaServer, timeout_s: float = TIMEOUT_S):
    return build_provider(
        ProviderConfig(provider="openai", base_url=server.base_url, model=server.model, timeout_s=timeout_s)
    )


def ask(text: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text)]


def test_provider_plain_call_returns_text(llama_server: LlamaServer) -> None:
    completion = provider_for(llama_server).call(ask(SHORT))
    assert completion.failure is None, completion.detail
    assert isinstance(completion.text, str) and completion.text.strip()
    assert completion.provider == "openai" and completion.model == llama_server.model
    assert completion.status_code == 200 and completion.request_bytes > 0 and completion.response_bytes > 0


def test_provider_stream_feeds_pieces_that_make_the_text(llama_server: LlamaServer) -> None:
    sink = Sink()
    # Through the chain the pipeline holds, which announces each attempt with `sink.begin`.
    completion: Completion = FallbackChain([provider_for(llama_server)]).stream(ask(SHORT), sink)
    assert completion.failure is None, completion.detail
    assert sink.begun == [("openai", llama_server.model)]
    assert len(sink.pieces) >= 3, sink.pieces
    assert all(isinstance(piece, str) and piece for piece in sink.pieces)
    assert "".join(sink.pieces) == completion.text
    assert completion.stopped_early is False
    assert completion.finish_reason in ("stop", "length")
    assert completion.usage is None  # llama.cpp sends none in a stream (see the raw test)
    assert completion.first_text_ms is not None and 0 < completion.first_text_ms <= completion.elapsed_ms


def test_provider_sends_max_tokens_and_the_engine_stops_there(llama_server: LlamaServer) -> None:
    """`LLM_MAX_TOKENS` bounds a real answer: the 700+ token story ends at the bound, as the
    engine says (`finish_reason` "length") and counts (its own log)."""
    config = ProviderConfig(
        provider="openai", base_url=llama_server.base_url, model=llama_server.model, timeout_s=TIMEOUT_S, max_tokens=12
    )
    offset = log_size(llama_server)
    completion = build_provider(config).call(ask(LONG))
    assert completion.failure is None and completion.text, completion.detail
    assert completion.finish_reason == "length"
    wait_until(lambda: finished_generations(llama_server, offset), "llama.cpp logged no finished generation", TIMEOUT_S)
    assert max(finished_generations(llama_server, offset)) <= 12


def test_provider_stops_reading_when_the_sink_says_so_and_the_engine_serves_on(llama_server: LlamaServer) -> None:
    """`feed` answers False after the first piece of a long story: the call ends at once with
    that piece as its text, and the engine (which stops generating when the client goes
    away, after its next token) answers the next call without finishing the story first."""
    provider = provider_for(llama_server)
    sink = Sink(stop_after=1)
    offset = log_size(llama_server)
    stopped = provider.stream(ask(LONG), sink)
    assert stopped.failure is None, stopped.detail
    assert stopped.stopped_early is True
    assert sink.pieces and len(sink.pieces) == 1
    assert stopped.text == sink.pieces[0]  # what was read until then (that the connection closed at once:
    # test_provider_streaming.py::test_sink_stop_closes_the_stream_and_the_server_stops_sending)
    after = provider.call(ask(SHORT))
    assert after.failure is None and after.text, after.detail
    assert_only_the_short_answer_was_finished(llama_server, offset)


def assert_only_the_short_answer_was_finished(llama_server: LlamaServer, offset: int) -> None:
    """The engine's log since `offset` shows one finished generation, the short answer's: the story
    (700+ tokens) was dropped, not generated to its end behind the client's back first."""
    wait_until(lambda: finished_generations(llama_server, offset), "llama.cpp logged no finished generation", TIMEOUT_S)
    finished = finished_generations(llama_server, offset)
    assert max(finished) < STORY_TOKENS, f"the engine went on generating the abandoned story: {finished} tokens"


def test_provider_stream_cancelled_from_another_thread_returns_promptly(llama_server: LlamaServer) -> None:
    provider = provider_for(llama_server)
    sink = Sink()
    cancel = CancelToken()
    cancelled_at: list[float] = []

    def press_stop() -> None:
        if sink.first.wait(TIMEOUT_S):
            time.sleep(0.2)  # in the middle of the answer, between two reads
            cancelled_at.append(time.monotonic())
            cancel.cancel()

    stopper = threading.Thread(target=press_stop)
    stopper.start()
    offset = log_size(llama_server)
    completion = provider.stream(ask(LONG), sink, cancel=cancel)
    stopper.join()
    assert cancelled_at, "no piece was fed"
    assert completion.failure is FailureKind.CANCELLED, (completion.failure, completion.detail)
    assert completion.text is None  # cancelled, not read to its end (the hang-up itself:
    # test_provider_streaming.py::test_cancel_in_the_middle_of_a_stream)
    after = provider.call(ask(SHORT))
    assert after.failure is None and after.text, after.detail
    assert_only_the_short_answer_was_finished(llama_server, offset)


def test_provider_stream_cut_short_by_another_request_is_a_failure(llama_server: LlamaServer) -> None:
    """What our provider makes of the cut of the raw test above: a `[DONE]` with no
    `finish_reason` is not a finished answer, so the call fails (CONNECTION) and the pipeline
    resets what it showed and retries, instead of storing half an answer as whole."""
    provider = provider_for(llama_server)
    sink = Sink()
    result: list[Completion] = []
    reader = threading.Thread(target=lambda: result.append(provider.stream(ask(LONG), sink)))
    reader.start()
    assert sink.first.wait(TIMEOUT_S), "no piece was fed"
    second = requests.post(
        f"{llama_server.base_url}/chat/completions", timeout=TIMEOUT_S, json=chat_body(llama_server, SHORT)
    )
    reader.join(TIMEOUT_S)
    assert second.status_code == 200
    assert result, "the provider call did not return"
    cut = result[0]
    assert cut.failure is FailureKind.CONNECTION and cut.text is None, (cut.failure, cut.detail)
    assert sink.pieces and cut.finish_reason is None


# c. our server, end to end --------------------------------------------------------------------


@dataclass(frozen=True)
class Product:
    base: str
    token: str
    log_path: Path

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@pytest.fixture(scope="module")
def product(llama_server: LlamaServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Product]:
    """`python app.py` as a user runs it, with LLM_PROVIDER=openai pointing at llama.cpp.

    A real model may write any command, so the process gets the same loopback-only socket
    guard as this one (a `sitecustomize` on its PYTHONPATH) and every outbound tool URL points
    at a closed loopback port."""
    tmp = tmp_path_factory.mktemp("llm-product")
    guard = tmp / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(NETWORK_GUARD, encoding="utf-8")
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in SETTING_NAMES and not key.endswith("_API_KEY")}
    env.update(
        HOST="127.0.0.1",
        PORT=str(port),
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(guard), str(ROOT), os.environ.get("PYTHONPATH")])),
        DATABASE_PATH=str(tmp / "app.db"),
        DATA_DIR=str(tmp / "data"),
        AUTH_TOKEN_FILE=str(tmp / "admin.token"),
        LLM_PROVIDER="openai",
        LLM_BASE_URL=llama_server.base_url,
        LLM_MODEL=llama_server.model,
        LLM_TIMEOUT_S=str(TIMEOUT_S),
        LLM_DECIDE="greedy",  # streaming, Stop and cancel here; the decision by mass: test_decide_real.py
        JUDGE_ENABLED="0",
        SEARCH_URL=FAR_AWAY,
        WEATHER_URL=FAR_AWAY,
        GEOCODING_URL=FAR_AWAY,
    )
    log_path = tmp / "server.log"
    log = log_path.open("w")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(process, f"{base}/health", log_path)
        yield Product(base=base, token=(tmp / "admin.token").read_text().strip(), log_path=log_path)
    finally:
        stop_process(process, log)


def new_session(product: Product) -> str:
    response = requests.post(f"{product.base}/sessions", json={}, headers=product.auth, timeout=10)
    assert response.status_code in (200, 201), response.text
    return response.json()["id"]


def shown_text(events: list[Frame]) -> str:
    """The deltas' text after the last `answer.reset` (SPEC 7)."""
    text: list[str] = []
    for frame in events:
        if frame.event == "answer.reset":
            text = []
        elif frame.event == "answer.delta":
            text.append(frame.json()["text"])
    return "".join(text)


def stored_messages(product: Product, session_id: str) -> list[dict[str, Any]]:
    response = requests.get(
        f"{product.base}/sessions/{session_id}/messages", params={"limit": 200}, headers=product.auth, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.json()["messages"]


def test_product_plain_chat_against_the_real_model(product: Product) -> None:
    message = PROMPTS[1]
    response = requests.post(f"{product.base}/chat", json={"message": message}, headers=product.auth, timeout=TIMEOUT_S)
    assert response.status_code == 200, f"{response.status_code} {response.text}\n{product.log_tail()}"
    body = response.json()
    assert isinstance(body["turn_id"], str) and body["turn_id"]
    assert isinstance(body["reply"], str) and body["reply"].strip()
    roles = [stored["role"] for stored in body["messages"]]
    assert roles[0] == "user" and roles[-1] == "assistant", roles
    assert body["messages"][0]["content"] == message
    assert body["messages"][-1]["content"] == body["reply"]
    if body["tool"] is None:  # the model may, rarely, start with a /command: then a tool turn
        assert roles == ["user", "assistant"]
    assert [m["id"] for m in stored_messages(product, body["session_id"])] == [m["id"] for m in body["messages"]]


def stream_turn(product: Product, message: str) -> list[Frame]:
    with requests.post(
        f"{product.base}/chat",
        json={"message": message},
        stream=True,
        timeout=TIMEOUT_S,
        headers={**product.auth, "Accept": "text/event-stream"},
    ) as response:
        assert response.status_code == 200, response.text
        assert response.headers["Content-Type"].startswith("text/event-stream")
        return [frame for frame in frames(response) if frame.event]


def test_product_streams_answer_deltas_from_the_real_model(product: Product) -> None:
    long_plain_turns = 0
    for prompt in PROMPTS:
        events = stream_turn(product, prompt)
        names = [frame.event for frame in events]
        assert names[0] == "turn.started", names
        assert names[-1] == "done", f"{names}\n{product.log_tail()}"
        done = events[-1].json()
        turn_id = done["turn_id"]
        assert all(frame.json().get("turn_id") == turn_id for frame in events if frame.event != "heartbeat")
        assert all(frame.id is not None for frame in events)
        assert "provider.request" in names
        if "answer.delta" in names:
            assert names.index("provider.request") < names.index("answer.delta")
        assert done["reply"] == shown_text(events)  # SPEC 7, for tool turns too
        if "command.detected" in names or done.get("tool") is not None:
            continue  # the tiny model started its reply with "/": a tool turn, not this test's subject
        deltas = [frame.json() for frame in events if frame.event == "answer.delta"]
        assert deltas, "a plain reply with no answer.delta"
        assert all(set(delta) >= {"turn_id", "pass", "text"} and isinstance(delta["text"], str) for delta in deltas)
        assert [frame.json()["role"] for frame in events if frame.event == "message.stored"] == ["user", "assistant"]
        assert done["messages"][-1]["role"] == "assistant" and done["messages"][-1]["content"] == done["reply"]
        if len(done["reply"]) >= 20:  # a reply of several tokens streams as several deltas
            assert len(deltas) >= 3, f"{len(deltas)} answer.delta for a {len(done['reply'])}-character reply"
            long_plain_turns += 1
            if long_plain_turns >= 2:
                break
    assert long_plain_turns >= 1, "no prompt drew a plain reply of several tokens from the model"


def test_product_cancel_mid_answer_keeps_the_text_shown(product: Product, llama_server: LlamaServer) -> None:
    for _ in range(3):
        session_id = new_session(product)
        events: list[Frame] = []
        cancel: requests.Response | None = None
        offset = log_size(llama_server)
        with requests.post(
            f"{product.base}/chat",
            json={"message": LONG, "session_id": session_id},
            stream=True,
            timeout=TIMEOUT_S,
            headers={**product.auth, "Accept": "text/event-stream"},
        ) as response:
            assert response.status_code == 200, response.text
            for frame in frames(response):
                if not frame.event:
                    continue
                events.append(frame)
                if frame.event == "answer.delta" and cancel is None:
                    cancel = requests.post(
                        f"{product.base}/sessions/{session_id}/cancel", json={}, headers=product.auth, timeout=10
                    )
        finished = finished_generations(llama_server, offset)  # what the engine had completed when `done` came
        names = [frame.event for frame in events]
        assert names and names[-1] == "done", f"{names}\n{product.log_tail()}"
        done = events[-1].json()
        if cancel is None:
            assert done.get("tool") is not None, "no answer.delta and no tool: nothing was shown"
            continue  # a /command reply: nothing to cancel mid-answer, try again
        if cancel.status_code == 409 and cancel.json()["error"]["code"] == "no_turn_in_progress":
            continue  # the whole answer came before the cancel; try again
        assert cancel.status_code == 200, cancel.text
        assert cancel.json() == {"turn_id": done["turn_id"], "cancelled": True}
        assert done["stopped"] is True
        # the stream ended before the engine could finish the story (it was closed, not read to its end)
        assert all(tokens < STORY_TOKENS for tokens in finished), f"the story was generated to its end: {finished}"
        shown = shown_text(events)
        assert shown.strip() and done["reply"] == shown
        assistant = [message for message in stored_messages(product, session_id) if message["role"] == "assistant"]
        assert len(assistant) == 1
        assert assistant[0]["content"] == shown
        assert (assistant[0].get("meta") or {}).get("stopped") is True
        session = requests.get(f"{product.base}/sessions/{session_id}", headers=product.auth, timeout=10)
        assert session.status_code == 200 and session.json().get("active_turn") is None
        follow_up = requests.post(
            f"{product.base}/chat",
            json={"message": PROMPTS[2], "session_id": session_id},
            headers=product.auth,
            timeout=TIMEOUT_S,
        )
        assert follow_up.status_code == 200, follow_up.text  # the session and the engine serve on
        return
    pytest.fail("three attempts never caught the model mid-answer")
