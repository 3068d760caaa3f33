"""Direct HTTP/1.1 to a plain `http://` model server (`llm/direct.py`), over real sockets.

Which transport a URL gets; the request on the wire; status codes, headers and bodies as the
failure classes read them; connection reuse, and the replacement of a kept-alive connection
that the server closed; content codings, interim replies, bodies that end with the
connection, an oversized head; many calls at once. Deadlines, cancels and streamed pieces
are tested for both transports in tests/llm/test_provider_streaming.py and
tests/llm/test_provider_body.py.
"""

from __future__ import annotations

import gzip
import json
import threading
from collections.abc import Iterator

import pytest
import requests

from llm.direct import READ_SIZE, DirectPost
from llm.transport import PostTemplate, prepare_post
from providers import ChatMessage, FailureKind, Provider, ProviderConfig, build_provider
from tests.raw_http_support import HANG_UP, RawHTTPServer, json_reply, raw_servers, sse_reply

MESSAGES = [ChatMessage(role="user", content="hello")]
OK_JSON = json.dumps({"choices": [{"message": {"content": "whole"}, "finish_reason": "stop"}]}).encode()


@pytest.fixture
def serve() -> Iterator[type[RawHTTPServer]]:
    with raw_servers() as start:
        yield start


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


class SleepRecorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def provider(server: RawHTTPServer, *, key: str | None = None, sleep: SleepRecorder | None = None) -> Provider:
    config = ProviderConfig(provider="openai", base_url=f"{server.base_url}/v1", model="m", api_key=key, timeout_s=5)
    return build_provider(config, sleep=sleep or SleepRecorder())


def head_fields(head: bytes) -> tuple[str, dict[str, str]]:
    request_line, *lines = head.decode("latin-1").split("\r\n")
    return request_line, {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines)}


# --- which transport -------------------------------------------------------------------------------


def test_a_plain_http_url_without_a_proxy_is_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    session = requests.Session()
    assert isinstance(prepare_post(session, "http://127.0.0.1:8080/v1/chat/completions", {}), DirectPost)
    for url in ("https://api.example/v1/chat/completions", "http://user:secret@127.0.0.1:8080/v1/chat/completions"):
        assert isinstance(prepare_post(session, url, {}), PostTemplate)
    proxied = requests.Session()
    proxied.proxies = {"http": "http://proxy.example:3128"}
    assert isinstance(prepare_post(proxied, "http://127.0.0.1:8080/v1/chat/completions", {}), PostTemplate)


def test_an_env_proxy_routes_through_requests_unless_no_proxy_names_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    proxied = build_provider(ProviderConfig(provider="openai", base_url="http://10.1.2.3:8080/v1"))
    assert isinstance(prepare_post(proxied.http, "http://10.1.2.3:8080/v1/chat/completions", {}), PostTemplate)
    monkeypatch.setenv("NO_PROXY", "10.1.2.3")
    bypassing = build_provider(ProviderConfig(provider="openai", base_url="http://10.1.2.3:8080/v1"))
    assert isinstance(prepare_post(bypassing.http, "http://10.1.2.3:8080/v1/chat/completions", {}), DirectPost)


# --- the request -------------------------------------------------------------------------------------


def test_the_request_on_the_wire(serve: type[RawHTTPServer]) -> None:
    server = serve([sse_reply("one"), sse_reply("two")])
    chat = provider(server, key="sk-1")
    assert chat.complete(MESSAGES) == "one"
    assert chat.complete([*MESSAGES, ChatMessage(role="assistant", content="one, longer")]) == "two"

    for head, body in server.requests:
        request_line, fields = head_fields(head)
        assert request_line == "POST /v1/chat/completions HTTP/1.1"
        assert fields["host"] == f"127.0.0.1:{server.port}"
        assert fields["content-type"] == "application/json"
        assert fields["accept"] == "text/event-stream, application/json"
        assert fields["authorization"] == "Bearer sk-1"
        assert fields["accept-encoding"] == "identity"
        assert int(fields["content-length"]) == len(body)
        assert json.loads(body)["stream"] is True
    assert len(server.requests[0][1]) < len(server.requests[1][1])
    assert server.connections == 1


def test_a_key_with_a_line_break_never_reaches_the_wire(serve: type[RawHTTPServer]) -> None:
    server = serve([sse_reply("never")])
    result = provider(server, key="sk-1\r\nX-Injected: yes").call(MESSAGES)
    assert result.failure is FailureKind.NOT_CONFIGURED and "API key" in result.detail
    assert server.connections == 0


# --- replies -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "kind", "status", "detail"),
    [
        (json_reply(401, b'{"error": {"message": "bad key"}}'), FailureKind.AUTH, 401, "bad key"),
        (json_reply(503, b"<html>down</html>"), FailureKind.SERVER_ERROR, 503, "HTTP 503"),
        (json_reply(200, b"<html>hi</html>"), FailureKind.MALFORMED, 200, "not JSON"),
        (json_reply(307, b"", "Location: http://elsewhere.example/v1"), FailureKind.CLIENT_ERROR, 307, "redirects"),
    ],
    ids=["401", "503-html", "200-not-json", "307"],
)
def test_statuses_and_bodies_are_classified(
    serve: type[RawHTTPServer], reply: bytes, kind: FailureKind, status: int, detail: str
) -> None:
    server = serve([reply])
    result = provider(server).call(MESSAGES)
    assert (result.text, result.failure, result.status_code) == (None, kind, status)
    assert detail in result.detail


def test_an_error_body_is_read_up_to_64_kib(serve: type[RawHTTPServer]) -> None:
    server = serve([json_reply(500, b"x" * (1024 * 1024))])
    result = provider(server).call(MESSAGES)
    assert result.failure is FailureKind.SERVER_ERROR
    assert 64 * 1024 <= result.response_bytes <= 64 * 1024 + READ_SIZE  # at most one read past the limit


def test_a_429_with_a_short_retry_after_is_retried_on_the_same_connection(serve: type[RawHTTPServer]) -> None:
    server = serve([json_reply(429, b'{"error": "slow down"}', "Retry-After: 2"), sse_reply("finally")])
    sleep = SleepRecorder()
    result = provider(server, sleep=sleep).call(MESSAGES)
    assert (result.text, sleep.calls, len(server.requests), server.connections) == ("finally", [2.0], 2, 1)


def test_a_whole_json_reply_is_read(serve: type[RawHTTPServer]) -> None:
    server = serve([json_reply(200, OK_JSON), json_reply(200, OK_JSON)])
    chat = provider(server)
    assert [chat.complete(MESSAGES), chat.complete(MESSAGES)] == ["whole", "whole"]
    assert server.connections == 1


def test_a_gzip_reply_is_decoded(serve: type[RawHTTPServer]) -> None:
    server = serve([json_reply(200, gzip.compress(OK_JSON), "Content-Encoding: gzip")])
    assert provider(server).complete(MESSAGES) == "whole"


def test_an_unsupported_content_coding_is_malformed(serve: type[RawHTTPServer]) -> None:
    server = serve([json_reply(200, b"\x0b\x02\x80", "Content-Encoding: br")])
    result = provider(server).call(MESSAGES)
    assert result.failure is FailureKind.MALFORMED and "content coding" in result.detail


def test_an_interim_reply_before_the_answer_is_skipped(serve: type[RawHTTPServer]) -> None:
    server = serve([b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>\r\n\r\n" + sse_reply("after hints")])
    assert provider(server).complete(MESSAGES) == "after hints"


def test_a_body_that_ends_with_the_connection_is_read_and_the_connection_not_kept(
    serve: type[RawHTTPServer],
) -> None:
    reply = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK_JSON
    server = serve([reply, reply], close_after=True)
    chat = provider(server)
    assert [chat.complete(MESSAGES), chat.complete(MESSAGES)] == ["whole", "whole"]
    assert server.connections == 2


def test_a_head_larger_than_64_kib_is_refused(serve: type[RawHTTPServer]) -> None:
    huge = b"HTTP/1.1 200 OK\r\nX-Filler: " + b"a" * (100 * 1024) + b"\r\nContent-Length: 2\r\n\r\n{}"
    server = serve([huge], close_after=True)
    result = provider(server).call(MESSAGES)
    assert result.failure is FailureKind.CONNECTION and "head" in result.detail


# --- kept-alive connections -------------------------------------------------------------------------


def test_an_idle_connection_the_server_closed_is_replaced_before_sending(serve: type[RawHTTPServer]) -> None:
    server = serve([sse_reply("one"), sse_reply("two")], close_after=True)
    chat = provider(server)
    assert chat.complete(MESSAGES) == "one"
    assert chat.complete(MESSAGES) == "two"
    assert (server.connections, len(server.requests)) == (2, 2)


def test_a_kept_connection_closed_without_a_reply_is_replaced_once(serve: type[RawHTTPServer]) -> None:
    """The server's idle timeout ran out while the request was on its way: not one byte came
    back, so the request is sent again on a new connection."""
    server = serve([sse_reply("one"), HANG_UP, sse_reply("two")])
    chat = provider(server)
    assert chat.complete(MESSAGES) == "one"
    assert chat.complete(MESSAGES) == "two"
    assert (server.connections, len(server.requests)) == (2, 3)


def test_a_new_connection_closed_without_a_reply_is_a_connection_failure(serve: type[RawHTTPServer]) -> None:
    server = serve([HANG_UP, sse_reply("not asked for")])
    result = provider(server).call(MESSAGES)
    assert result.failure is FailureKind.CONNECTION
    assert len(server.requests) == 1  # a new connection is not tried again


def test_calls_at_once_each_read_their_own_reply(serve: type[RawHTTPServer]) -> None:
    texts = [f"reply {index}" for index in range(16)]
    server = serve([sse_reply(text) for text in texts])
    chat = provider(server)
    results: list[str | None] = []
    barrier = threading.Barrier(len(texts))

    def call() -> None:
        barrier.wait()
        results.append(chat.complete(MESSAGES))

    threads = [threading.Thread(target=call) for _ in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results, key=str) == sorted(texts)


def test_closing_the_provider_closes_its_idle_connections(serve: type[RawHTTPServer]) -> None:
    server = serve([sse_reply("one"), sse_reply("two")])
    chat = provider(server)
    assert chat.complete(MESSAGES) == "one"
    chat.close()  # what the app's `Services.close` does at shutdown
    assert chat.complete(MESSAGES) == "two"
    assert server.connections == 2
