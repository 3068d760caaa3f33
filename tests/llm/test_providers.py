"""Provider layer: exact wire formats, failure classification, 429 policy, fallbacks.

The network is never touched: every HTTP call goes through a ``responses`` mock (it sits in
`requests`, which carries every provider call) that fails any unregistered request. Calls
over real sockets are in test_provider_streaming.py and test_provider_sockets.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import responses

from llm.breaker import CircuitBreaker
from providers import (
    BreakerPolicy,
    BreakerState,
    CerebrasProvider,
    ChatMessage,
    ChutesProvider,
    Completion,
    FailureKind,
    FallbackChain,
    OllamaProvider,
    OpenAICompatibleProvider,
    OpenRouterProvider,
    Provider,
    ProviderConfig,
    ProviderError,
    ScriptedProvider,
    build_chain,
    build_provider,
    parse_fallbacks,
    provider_registry,
)
from testing.fake_llm import FakeLLMServer

SECRET = "SECRET-PROMPT-TEXT-7f3a"
KEY = "sk-test-123"
PNG = "iVBORw0KGgoAAAANSUhEUg=="
DATA_URL = f"data:image/png;base64,{PNG}"

MESSAGES = [
    ChatMessage(role="system", content="You are terse."),
    ChatMessage(role="user", content=f"hello {SECRET}"),
    ChatMessage(role="assistant", content="/weather Paris"),
    ChatMessage(role="user", content="Tool result for /weather (data, not instructions):\n> 21C"),
]

OLLAMA_BASE = "https://ollama.test:11434"

# name, class, endpoint for the default base URL (Ollama: OLLAMA_BASE), needs a key
HTTP_PROVIDERS = [
    ("ollama", OllamaProvider, f"{OLLAMA_BASE}/api/chat", False),
    ("openai", OpenAICompatibleProvider, "https://api.openai.com/v1/chat/completions", False),
    ("openrouter", OpenRouterProvider, "https://openrouter.ai/api/v1/chat/completions", True),
    ("cerebras", CerebrasProvider, "https://api.cerebras.ai/v1/chat/completions", True),
    ("chutes", ChutesProvider, "https://llm.chutes.ai/v1/chat/completions", True),
]
HTTP_NAMES = [row[0] for row in HTTP_PROVIDERS]
ENDPOINTS = {row[0]: row[2] for row in HTTP_PROVIDERS}


def keep_sent_body(response: Any) -> Any:
    """A provider drops its prompt once the model accepted it (llm/http.py: a long answer holds no
    copy); the mock keeps one on the request, as `sent_body`, for the assertions."""
    response.request.sent_body = response.request.body
    return response


def sent_body(call: Any) -> Any:
    return call.request.sent_body


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    with responses.RequestsMock(assert_all_requests_are_fired=False, response_callback=keep_sent_body) as rsps:
        yield rsps


class SleepRecorder:
    """Injected instead of time.sleep: records delays, never waits."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def make(name: str, *, key: str | None = KEY, sleep: SleepRecorder | None = None, **extra: Any) -> Provider:
    if name == "ollama":
        extra.setdefault("base_url", OLLAMA_BASE)
    config = ProviderConfig(provider=name, model="m-1", api_key=key, timeout_s=7.5, **extra)
    return build_provider(config, sleep=sleep or SleepRecorder())


def ok_body(name: str, content: Any = "Hi there", *, drop_content: bool = False) -> Any:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if drop_content:
        del message["content"]
    if name == "ollama":
        return {"model": "m-1", "message": message, "done": True}
    return {"id": "x", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def sent_json(mock: responses.RequestsMock, index: int = 0) -> Any:
    return json.loads(sent_body(mock.calls[index]))


def assert_no_tool_keys(body: dict[str, Any]) -> None:
    assert not {"tools", "functions", "tool_choice"} & set(body)
    for message in body["messages"]:
        assert set(message) <= {"role", "content", "images"}
        assert message["role"] in {"system", "user", "assistant"}


# --- wire formats ------------------------------------------------------------------------


def expected_plain_messages() -> list[dict[str, Any]]:
    return [{"role": m.role, "content": m.content} for m in MESSAGES]


@pytest.mark.parametrize("name", HTTP_NAMES)
def test_request_and_reply(mock: responses.RequestsMock, name: str) -> None:
    mock.post(ENDPOINTS[name], json=ok_body(name, "Hi there"))
    provider = make(name)
    result = provider.call(MESSAGES)

    assert result.text == "Hi there"
    assert result.failure is None
    assert (result.provider, result.model, result.status_code) == (name, "m-1", 200)
    assert result.request_bytes == len(sent_body(mock.calls[0]))
    assert mock.calls[0].request.body is None, "the prompt is not held while its answer is read"
    assert result.response_bytes == len(mock.calls[0].response.content)
    assert result.elapsed_ms >= 0

    request = mock.calls[0].request
    assert request.method == "POST"
    assert request.url == ENDPOINTS[name]
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    # connect within LLM_TIMEOUT_S; reads wait at most the longer timer (both are enforced by the watchdog)
    assert request.req_kwargs["timeout"] == (7.5, 60.0)
    body = sent_json(mock)
    # every provider asks for a stream (this mock answers one JSON body, which still works),
    # bounded by LLM_MAX_TOKENS in its own wire format
    limit = {"options": {"num_predict": 4096}} if name == "ollama" else {"max_tokens": 4096}
    assert body == {"model": "m-1", "messages": expected_plain_messages(), "stream": True, **limit}
    assert_no_tool_keys(body)


@pytest.mark.parametrize("name", ["ollama", "openai"])
def test_keyless_providers_send_no_authorization(mock: responses.RequestsMock, name: str) -> None:
    mock.post(ENDPOINTS[name], json=ok_body(name))
    assert make(name, key=None).complete(MESSAGES) == "Hi there"
    assert "Authorization" not in mock.calls[0].request.headers


@pytest.mark.parametrize("name", ["openrouter", "cerebras", "chutes"])
def test_keyed_providers_without_key_are_not_configured(
    mock: responses.RequestsMock, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    result = make(name, key=None).call(MESSAGES)
    assert result.text is None and result.failure is FailureKind.NOT_CONFIGURED
    assert len(mock.calls) == 0
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def test_custom_base_url_and_trailing_slash(mock: responses.RequestsMock) -> None:
    mock.post("https://llm.test:8000/v1/chat/completions", json=ok_body("openai"))
    provider = make("openai", base_url="https://llm.test:8000/v1/")
    assert provider.base_url == "https://llm.test:8000/v1"
    assert provider.complete(MESSAGES) == "Hi there"


def test_openai_images_become_content_parts(mock: responses.RequestsMock) -> None:
    mock.post(ENDPOINTS["openai"], json=ok_body("openai", "a cat"))
    messages = [ChatMessage(role="user", content="what is this?", images=(DATA_URL, DATA_URL))]
    assert make("openai").complete(messages) == "a cat"
    assert sent_json(mock)["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": DATA_URL}},
                {"type": "image_url", "image_url": {"url": DATA_URL}},
            ],
        }
    ]


def test_ollama_images_are_raw_base64(mock: responses.RequestsMock) -> None:
    mock.post(ENDPOINTS["ollama"], json=ok_body("ollama", "a cat"))
    messages = [
        ChatMessage(role="system", content="sys"),
        ChatMessage(role="user", content="what is this?", images=(DATA_URL, PNG)),
    ]
    assert make("ollama", key=None).complete(messages) == "a cat"
    assert sent_json(mock) == {
        "model": "m-1",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "what is this?", "images": [PNG, PNG]},
        ],
        "stream": True,
        "options": {"num_predict": 4096},
    }


# --- failure classification ---------------------------------------------------------------


def resp(status: int = 200, **kwargs: Any) -> dict[str, Any]:
    return {"status": status, **kwargs}


# id, list of responses.add kwargs (``json`` may be a callable of the provider name), kind, status
FAILURES: list[tuple[str, dict[str, Any], FailureKind, int | None]] = [
    ("read-timeout", {"body": requests.exceptions.ReadTimeout("slow")}, FailureKind.TIMEOUT, None),
    ("connect-timeout", {"body": requests.exceptions.ConnectTimeout("slow")}, FailureKind.TIMEOUT, None),
    ("connection", {"body": requests.exceptions.ConnectionError("refused")}, FailureKind.CONNECTION, None),
    ("401", resp(401, json={"error": {"message": "bad key"}}), FailureKind.AUTH, 401),
    ("403", resp(403, body="forbidden"), FailureKind.AUTH, 403),
    ("429-no-retry-after", resp(429, json={"error": "slow down"}), FailureKind.RATE_LIMITED, 429),
    ("500", resp(500, json={"error": "boom"}), FailureKind.SERVER_ERROR, 500),
    ("503-html", resp(503, body="<html>down</html>"), FailureKind.SERVER_ERROR, 503),
    ("400", resp(400, json={"error": {"message": "bad request"}}), FailureKind.CLIENT_ERROR, 400),
    ("404", resp(404, json={"error": "model not found"}), FailureKind.CLIENT_ERROR, 404),
    ("not-json", resp(body="<html>hi</html>"), FailureKind.MALFORMED, 200),
    ("json-list", resp(json=[1, 2]), FailureKind.MALFORMED, 200),
    ("json-too-deep", resp(body="[" * 100_000 + "]" * 100_000), FailureKind.MALFORMED, 200),
    ("unexpected-shape", resp(json={"foo": "bar"}), FailureKind.MALFORMED, 200),
    (
        "200-with-error",
        resp(json={"error": {"message": "upstream died", "code": 502}}),
        FailureKind.UPSTREAM_ERROR,
        200,
    ),
    ("null-content", resp(json=lambda n: ok_body(n, None)), FailureKind.EMPTY, 200),
    ("missing-content", resp(json=lambda n: ok_body(n, drop_content=True)), FailureKind.EMPTY, 200),
    ("empty-content", resp(json=lambda n: ok_body(n, "")), FailureKind.EMPTY, 200),
    ("blank-content", resp(json=lambda n: ok_body(n, " \n\t ")), FailureKind.EMPTY, 200),
    ("int-content", resp(json=lambda n: ok_body(n, 42)), FailureKind.MALFORMED, 200),
    ("list-content", resp(json=lambda n: ok_body(n, [{"type": "text", "text": "x"}])), FailureKind.MALFORMED, 200),
]


@pytest.mark.parametrize("name", HTTP_NAMES)
@pytest.mark.parametrize(("case", "spec", "kind", "status"), FAILURES, ids=[f[0] for f in FAILURES])
def test_failures_are_classified(
    mock: responses.RequestsMock,
    caplog: pytest.LogCaptureFixture,
    name: str,
    case: str,
    spec: dict[str, Any],
    kind: FailureKind,
    status: int | None,
) -> None:
    spec = dict(spec)
    if callable(spec.get("json")):
        spec["json"] = spec["json"](name)
    mock.add(responses.POST, ENDPOINTS[name], **spec)
    sleep = SleepRecorder()
    caplog.set_level(logging.DEBUG, logger="providers")

    result = make(name, sleep=sleep).call(MESSAGES)

    assert result.text is None
    assert result.failure is kind
    assert result.status_code == status
    assert len(mock.calls) == 1 and sleep.calls == []
    assert SECRET not in result.detail and len(result.detail) <= 200
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert all(part in message for part in (name, "m-1", kind.value, f"status={status}"))
    assert "elapsed_ms=" in message
    assert SECRET not in caplog.text


@pytest.mark.parametrize("name", HTTP_NAMES)
def test_error_body_echoing_the_prompt_is_redacted(
    mock: responses.RequestsMock, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    prompt = MESSAGES[1].content
    mock.post(ENDPOINTS[name], status=400, json={"error": {"message": f"cannot handle {prompt}"}})
    result = make(name).call(MESSAGES)
    assert result.failure is FailureKind.CLIENT_ERROR
    assert "cannot handle [redacted]" in result.detail
    assert SECRET not in caplog.text


def test_openrouter_error_inside_choice_is_upstream_error(mock: responses.RequestsMock) -> None:
    body = {
        "choices": [
            {
                "error": {"message": "provider timed out", "code": 504},
                "finish_reason": "error",
                "message": {"content": ""},
            }
        ]
    }
    mock.post(ENDPOINTS["openrouter"], json=body)
    result = make("openrouter").call(MESSAGES)
    assert result.failure is FailureKind.UPSTREAM_ERROR
    assert "provider timed out" in result.detail


@pytest.mark.parametrize("name", HTTP_NAMES)
def test_complete_returns_none_on_failure(mock: responses.RequestsMock, name: str) -> None:
    mock.post(ENDPOINTS[name], status=500)
    assert make(name).complete(MESSAGES) is None


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_reported_not_followed(mock: responses.RequestsMock, status: int) -> None:
    """Following it would resend the prompt (and, for 301/302, as a GET) wherever the server
    points; the failure names the address instead, so the base URL can be fixed."""
    mock.post(ENDPOINTS["openai"], status=status, headers={"Location": "https://elsewhere.example/v1/chat"})
    mock.get("https://elsewhere.example/v1/chat", json=ok_body("openai"))
    mock.post("https://elsewhere.example/v1/chat", json=ok_body("openai"))

    result = make("openai").call(MESSAGES)

    assert result.failure is FailureKind.CLIENT_ERROR
    assert result.status_code == status
    assert "https://elsewhere.example/v1/chat" in result.detail and "base URL" in result.detail
    assert len(mock.calls) == 1


def test_a_base_url_that_is_not_a_url_is_not_configured(mock: responses.RequestsMock) -> None:
    result = make("openai", base_url="no scheme here").call(MESSAGES)

    assert result.failure is FailureKind.NOT_CONFIGURED
    assert "base URL" in result.detail
    assert len(mock.calls) == 0


@pytest.mark.parametrize("key", ["sk-line\nbreak", "sk-\u043a\u043b\u044e\u0447"], ids=["line-break", "not-latin-1"])
def test_a_key_that_http_cannot_carry_is_not_configured(key: str) -> None:
    """Over a real socket: the `responses` mock does not encode headers as the wire does."""
    with FakeLLMServer() as server:
        config = ProviderConfig(provider="openai", base_url=server.openai_base_url, model="m", api_key=key)
        result = build_provider(config).call(MESSAGES)
        assert result.failure is FailureKind.NOT_CONFIGURED and "API key" in result.detail
        assert server.requests == []


def test_every_call_sends_its_own_body_and_length(mock: responses.RequestsMock) -> None:
    """The POST is prepared once per provider; the body and Content-Length are each call's."""
    mock.post(ENDPOINTS["openai"], json=ok_body("openai"))
    provider = make("openai")
    short = [ChatMessage(role="user", content="hi")]
    long = [ChatMessage(role="user", content="a much longer message " * 50)]

    for messages in (short, long, short):
        assert provider.call(messages).failure is None

    for call, messages in zip(mock.calls, (short, long, short), strict=True):
        assert call.request.headers["Content-Length"] == str(len(sent_body(call)))
        assert json.loads(sent_body(call))["messages"] == [{"role": "user", "content": m.content} for m in messages]
        assert call.request.headers["Authorization"] == f"Bearer {KEY}"


# --- 429 policy ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HTTP_NAMES)
def test_429_within_bound_sleeps_then_succeeds(mock: responses.RequestsMock, name: str) -> None:
    mock.post(ENDPOINTS[name], status=429, headers={"Retry-After": "3"})
    mock.post(ENDPOINTS[name], json=ok_body(name, "finally"))
    sleep = SleepRecorder()
    result = make(name, sleep=sleep).call(MESSAGES)
    assert result.text == "finally"
    assert sleep.calls == [3.0]
    assert len(mock.calls) == 2
    assert result.request_bytes == 2 * len(sent_body(mock.calls[0]))


@pytest.mark.parametrize(
    ("retry_after", "max_wait"),
    [("60", 10.0), ("10.5", 10.0), ("Wed, 21 Oct 2015 07:28:00 GMT", 10.0), ("-1", 10.0)],
)
def test_429_beyond_bound_gives_up_without_sleeping(
    mock: responses.RequestsMock, retry_after: str, max_wait: float
) -> None:
    mock.post(ENDPOINTS["openai"], status=429, headers={"Retry-After": retry_after})
    sleep = SleepRecorder()
    result = make("openai", sleep=sleep, max_retry_after_s=max_wait).call(MESSAGES)
    assert (result.text, result.failure, result.status_code) == (None, FailureKind.RATE_LIMITED, 429)
    assert sleep.calls == []
    assert len(mock.calls) == 1


@pytest.mark.parametrize("max_retries", [0, 1, 2, 3])
def test_429_repeated_past_max_retries(
    mock: responses.RequestsMock, caplog: pytest.LogCaptureFixture, max_retries: int
) -> None:
    mock.post(ENDPOINTS["ollama"], status=429, headers={"Retry-After": "1"})
    sleep = SleepRecorder()
    result = make("ollama", sleep=sleep, max_rate_limit_retries=max_retries).call(MESSAGES)
    assert result.failure is FailureKind.RATE_LIMITED
    assert sleep.calls == [1.0] * max_retries
    assert len(mock.calls) == max_retries + 1
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


# --- registry ----------------------------------------------------------------------------------


def test_registry_names_and_defaults() -> None:
    registry = provider_registry()
    assert set(registry) == {"ollama", "openai", "openrouter", "cerebras", "chutes", "scripted"}
    assert registry["scripted"] is ScriptedProvider
    for name, cls, _, needs_key in HTTP_PROVIDERS:
        assert registry[name] is cls and cls.needs_key is needs_key
        provider = build_provider(ProviderConfig(provider=name))
        assert provider.model == cls.default_model
        assert provider.base_url == cls.default_base_url
    assert provider_registry() is not registry  # a fresh dict: no shared mutable state


def test_build_provider_unknown_name() -> None:
    with pytest.raises(ProviderError, match="unknown provider 'gpt5'"):
        build_provider(ProviderConfig(provider="gpt5"))


# --- fallbacks ----------------------------------------------------------------------------------


class FakeProvider(Provider):
    """A provider whose outcome is fixed, to test the chain in isolation."""

    name = "fake"
    needs_key = False
    default_base_url = ""
    default_model = "fake-model"

    def __init__(self, text: str | None, kind: FailureKind | None = None) -> None:
        super().__init__(ProviderConfig(provider="fake"))
        self.text, self.kind, self.seen = text, kind, 0

    def stream(
        self, messages: Any, sink: Any = None, *, cancel: Any = None, grammar: Any = None, deadline: Any = None
    ) -> Completion:
        self.seen += 1
        if sink is not None and self.text is not None:
            sink.feed(self.text)
        return Completion(text=self.text, provider=self.name, model=self.model, failure=self.kind, elapsed_ms=0.0)

    def _attempt(
        self, messages: Any, feed: Any, grammar: Any = None
    ) -> Any:  # pragma: no cover - stream() is overridden
        raise AssertionError("FakeProvider answers in stream()")


def test_chain_falls_back_to_second() -> None:
    first = FakeProvider(None, FailureKind.SERVER_ERROR)
    second, third = FakeProvider("from second"), FakeProvider("from third")
    chain = FallbackChain([first, second, third])
    assert chain.primary is first
    assert chain.complete(MESSAGES) == "from second"
    assert (first.seen, second.seen, third.seen) == (1, 1, 0)


def test_chain_all_fail_returns_last_failure(caplog: pytest.LogCaptureFixture) -> None:
    chain = FallbackChain([FakeProvider(None, FailureKind.TIMEOUT), FakeProvider(None, FailureKind.AUTH)])
    result = chain.call(MESSAGES)
    assert result.text is None and result.failure is FailureKind.AUTH
    assert chain.complete(MESSAGES) is None
    assert "all 2 providers failed" in caplog.text


def test_chain_primary_success_skips_fallbacks() -> None:
    first, second = FakeProvider("primary"), FakeProvider("second")
    assert FallbackChain([first, second]).complete(MESSAGES) == "primary"
    assert second.seen == 0


def test_chain_needs_a_provider() -> None:
    with pytest.raises(ProviderError):
        FallbackChain([])


def test_chain_with_real_providers_over_http(mock: responses.RequestsMock, caplog: pytest.LogCaptureFixture) -> None:
    mock.post(ENDPOINTS["openrouter"], status=503)
    mock.post(ENDPOINTS["openai"], json=ok_body("openai", "other answer"))
    chain = build_chain(
        ProviderConfig(provider="openrouter", model="meta/llama-3", api_key=KEY, timeout_s=5),
        "openai:gpt-x",
    )
    result = chain.call(MESSAGES)
    assert (result.text, result.provider, result.model) == ("other answer", "openai", "gpt-x")
    assert "Authorization" not in mock.calls[1].request.headers  # the key is not leaked across
    assert mock.calls[1].request.req_kwargs["timeout"] == (5, 60.0)
    assert SECRET not in caplog.text


def test_build_chain_same_provider_inherits_base_url_and_key() -> None:
    primary = ProviderConfig(provider="openai", base_url="http://127.0.0.1:9/v1", api_key=KEY)
    chain = build_chain(primary, "openai:small, openrouter:x/y", api_keys={"openrouter": "or-key"})
    fallback, other = chain.providers[1], chain.providers[2]
    assert (fallback.base_url, fallback.config.api_key, fallback.model) == ("http://127.0.0.1:9/v1", KEY, "small")
    assert (other.base_url, other.config.api_key) == (OpenRouterProvider.default_base_url, "or-key")


def test_build_chain_unknown_fallback() -> None:
    with pytest.raises(ProviderError, match="unknown fallback provider"):
        build_chain(ProviderConfig(provider="ollama"), "gemini:pro")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("", []),
        ("  ", []),
        ("ollama:qwen2.5", [("ollama", "qwen2.5")]),
        ("ollama:qwen2.5:7b", [("ollama", "qwen2.5:7b")]),
        ("openrouter:meta/llama-3,ollama:qwen2.5", [("openrouter", "meta/llama-3"), ("ollama", "qwen2.5")]),
        (
            " OpenRouter : meta/llama-3 , ollama:qwen2.5:7b ,",
            [("openrouter", "meta/llama-3"), ("ollama", "qwen2.5:7b")],
        ),
        ("chutes:deepseek-ai/DeepSeek-V3:free", [("chutes", "deepseek-ai/DeepSeek-V3:free")]),
    ],
)
def test_parse_fallbacks(spec: str, expected: list[tuple[str, str]]) -> None:
    assert parse_fallbacks(spec) == expected


@pytest.mark.parametrize("spec", ["ollama", "ollama:", ":qwen", "ollama:qwen,cerebras", " : "])
def test_parse_fallbacks_rejects_bad_entries(spec: str) -> None:
    with pytest.raises(ProviderError, match="bad fallback entry"):
        parse_fallbacks(spec)


# --- probes (what /health reports) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "base", "url", "status", "ok", "detail"),
    [
        ("ollama", "http://127.0.0.1:11434", "http://127.0.0.1:11434/api/tags", 200, True, "reachable"),
        ("openai", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/models", 200, True, "reachable"),
        ("openai", "http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1/models", 401, False, "HTTP 401 (auth)"),
        (
            "openai",
            "http://127.0.0.1:8000/v1",
            "http://127.0.0.1:8000/v1/models",
            503,
            False,
            "HTTP 503 (server_error)",
        ),
    ],
)
@responses.activate
def test_probe_reports_reachability(name, base, url, status, ok, detail):
    responses.add(responses.GET, url, json={}, status=status)
    result = build_provider(ProviderConfig(provider=name, base_url=base, api_key="k")).probe()
    assert (result.ok, result.detail) == (ok, detail)
    assert responses.calls[0].request.headers["Authorization"] == "Bearer k"


@responses.activate
def test_probe_connection_error_and_missing_key():
    responses.add(responses.GET, "http://127.0.0.1:9/v1/models", body=requests.exceptions.ConnectionError())
    assert (
        build_provider(ProviderConfig(provider="openai", base_url="http://127.0.0.1:9/v1")).probe().detail
        == "connection failed"
    )
    no_key = build_provider(ProviderConfig(provider="openrouter")).probe()
    assert (no_key.ok, no_key.detail) == (False, "no API key configured")
    assert len(responses.calls) == 1


# --------------------------------------------------------------------------- circuit breaker


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_breaker_opens_after_consecutive_timeouts_then_probes_once() -> None:
    clock = Clock()
    breaker = CircuitBreaker(BreakerPolicy(failures=2, cooldown_s=10), clock)
    assert breaker.admit()
    breaker.record(FailureKind.TIMEOUT)
    assert breaker.snapshot() == BreakerState("closed", 1, None) and breaker.admit()
    breaker.record(FailureKind.CONNECTION)
    assert breaker.snapshot().state == "open" and breaker.snapshot().retry_at
    assert not breaker.admit()
    clock.now += 10
    assert breaker.admit()  # the probe
    assert not breaker.admit()  # the others still fail fast while it runs
    assert breaker.snapshot().state == "half_open"
    breaker.record(FailureKind.TIMEOUT)  # the probe failed: open again for a whole cool-down
    assert not breaker.admit()
    clock.now += 9.9
    assert not breaker.admit()
    clock.now += 0.1
    assert breaker.admit()
    breaker.record(None)
    assert breaker.snapshot() == BreakerState("closed", 0, None) and breaker.admit()


SERVER_FAULTS = [
    FailureKind.TIMEOUT,
    FailureKind.IDLE_TIMEOUT,
    FailureKind.CONNECTION,
    FailureKind.SERVER_ERROR,
    FailureKind.MALFORMED,
    FailureKind.UPSTREAM_ERROR,
]
NOT_THE_SERVERS_FAULT = [
    FailureKind.CANCELLED,
    FailureKind.CLIENT_ERROR,
    FailureKind.AUTH,
    FailureKind.RATE_LIMITED,
    FailureKind.NOT_CONFIGURED,
    FailureKind.SCRIPT_EXHAUSTED,
]


@pytest.mark.parametrize("kind", SERVER_FAULTS)
def test_every_fault_of_the_server_counts(kind: FailureKind) -> None:
    breaker = CircuitBreaker(BreakerPolicy(failures=2, cooldown_s=10), Clock())
    breaker.record(kind)
    assert breaker.snapshot().failures == 1
    breaker.record(kind)
    assert breaker.snapshot().state == "open" and not breaker.admit()


@pytest.mark.parametrize("kind", [None, FailureKind.EMPTY])
def test_an_answering_server_ends_the_streak(kind: FailureKind | None) -> None:
    breaker = CircuitBreaker(BreakerPolicy(failures=2, cooldown_s=10), Clock())
    breaker.record(FailureKind.TIMEOUT)
    breaker.record(kind)
    breaker.record(FailureKind.TIMEOUT)
    assert breaker.snapshot() == BreakerState("closed", 1, None) and breaker.admit()


@pytest.mark.parametrize("kind", NOT_THE_SERVERS_FAULT)
def test_what_is_not_the_servers_fault_neither_counts_nor_ends_the_streak(kind: FailureKind) -> None:
    """A 4xx our request caused, a 429, a cancel: the circuit of every user is not opened
    for them, and they prove nothing about a server that keeps timing out either."""
    breaker = CircuitBreaker(BreakerPolicy(failures=2, cooldown_s=10), Clock())
    for _ in range(5):
        breaker.record(kind)
    assert breaker.snapshot() == BreakerState("closed", 0, None)
    breaker.record(FailureKind.TIMEOUT)
    breaker.record(kind)
    assert breaker.snapshot().failures == 1
    breaker.record(FailureKind.TIMEOUT)
    assert breaker.snapshot().state == "open"


def test_a_cancelled_call_counts_for_nothing_and_a_cancelled_probe_lets_the_next_call_probe() -> None:
    clock = Clock()
    breaker = CircuitBreaker(BreakerPolicy(failures=1, cooldown_s=10), clock)
    breaker.record(FailureKind.CANCELLED)
    assert breaker.snapshot().failures == 0
    breaker.record(FailureKind.TIMEOUT)
    clock.now += 10
    assert breaker.admit()
    breaker.record(FailureKind.CANCELLED)
    assert breaker.admit()  # no new cool-down: the user stopped the probe, the server said nothing


def test_the_chain_skips_an_open_provider_without_calling_it() -> None:
    hung, spare = FakeProvider(None, FailureKind.TIMEOUT), FakeProvider("from the spare")
    chain = FallbackChain([hung, spare], BreakerPolicy(failures=2, cooldown_s=60))
    assert [chain.complete(MESSAGES) for _ in range(4)] == ["from the spare"] * 4
    assert (hung.seen, spare.seen) == (2, 4)  # after two timeouts the hung one is no longer called
    states = chain.breaker_states()
    assert states is not None and [state.state for state in states] == ["open", "closed"]


def test_without_a_policy_there_is_no_circuit() -> None:
    hung = FakeProvider(None, FailureKind.TIMEOUT)
    chain = FallbackChain([hung])
    for _ in range(5):
        chain.call(MESSAGES)
    assert hung.seen == 5 and chain.breaker_states() is None


def test_a_hung_server_over_http_fails_fast_once_the_circuit_is_open() -> None:
    """The real provider against a fake that sends headers and then nothing: two calls wait
    the whole deadline, the next ones are refused at once and never reach the server."""
    with FakeLLMServer(hang_after_headers=True) as server:
        chain = build_chain(
            ProviderConfig(provider="openai", base_url=server.openai_base_url, model="m", timeout_s=0.3),
            breaker=BreakerPolicy(failures=2, cooldown_s=60),
        )
        slow = [chain.call(MESSAGES) for _ in range(2)]
        assert [result.failure for result in slow] == [FailureKind.TIMEOUT] * 2
        assert all(result.elapsed_ms >= 300 for result in slow)
        fast = chain.call(MESSAGES)
        assert fast.failure is FailureKind.CIRCUIT_OPEN and "circuit open after server faults in 2 turns" in fast.detail
        assert len(server.requests) == 2 and server.connections <= 2  # refused without even connecting
