"""OpenAI's `/chat/completions` wire format, spoken by OpenAI itself, vLLM, llama.cpp's
server, OpenRouter, Cerebras and Chutes.

Its stream is server-sent events: `choices[0].delta.content` pieces, a chunk with a
`finish_reason`, `usage` where the server sends it (OpenRouter always does, in the last
chunk), then `data: [DONE]`. No `stream_options` are sent: not every compatible server
accepts them. The answer's length is bounded by `max_tokens` (`LLM_MAX_TOKENS`), which
every one of these servers reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llm.base import Attempt, ChatMessage, FailureKind, TokenOdds
from llm.framing import Framing, SseDecoder
from llm.http import HttpProvider
from llm.wire import Parsed, decode_json, malformed, refused, string, token_counts, upstream_error


class OpenAICompatibleProvider(HttpProvider):
    """Any server speaking OpenAI's ``/chat/completions``. A key is optional because local
    servers often have none; the hosted subclasses require one."""

    name = "openai"
    needs_key = False
    default_base_url = "https://api.openai.com/v1"
    default_model = "gpt-4o-mini"

    stream_types = ("text/event-stream",)
    # Every OpenAI-compatible server sends a finish_reason before `[DONE]`; llama.cpp's server
    # sends a bare `[DONE]` when another request interrupts the stream, which must not pass
    # for a finished answer (the pipeline resets what was shown and retries).
    finish_reason_required = True
    # `openai` is any OpenAI-compatible server: llama.cpp's own server and llama-cpp-python take a
    # GBNF `grammar`; the operator turns it on (LLM_GRAMMAR) only for a server that does.
    accepts_grammar = True

    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def request_body(self, messages: Sequence[ChatMessage], grammar: str | None = None) -> dict[str, Any]:
        wire: list[dict[str, Any]] = []
        for message in messages:
            content: str | list[dict[str, Any]] = message.content
            if message.images:
                content = [{"type": "text", "text": message.content}] + [
                    {"type": "image_url", "image_url": {"url": image}} for image in message.images
                ]
            wire.append({"role": message.role, "content": content})
        body: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            "stream": True,
            "max_tokens": self.config.max_tokens,
            **self.config.sampling(),
        }
        if grammar is not None:
            body["grammar"] = grammar  # llama.cpp's server and llama-cpp-python: GBNF
        return body

    reads_odds = True  # `logprobs` / `top_logprobs`: OpenAI, vLLM, llama.cpp's server, llama-cpp-python

    def odds_body(self, messages: Sequence[ChatMessage], grammar: str | None, tokens: int, top: int) -> dict[str, Any]:
        body = self.request_body(messages, grammar)
        body.update({"stream": False, "max_tokens": tokens, "logprobs": True, "top_logprobs": top})
        return body

    def parse_odds(self, data: Any) -> tuple[TokenOdds, ...] | None:
        """`choices[0].logprobs.content`: each token with its `logprob` and `top_logprobs`."""
        try:
            content = data["choices"][0]["logprobs"]["content"]
            return tuple(
                TokenOdds(
                    token=str(item["token"]),
                    logprob=float(item["logprob"]),
                    top=tuple((str(alt["token"]), float(alt["logprob"])) for alt in item.get("top_logprobs") or ()),
                )
                for item in content
            )
        except (KeyError, IndexError, TypeError, ValueError):
            return None

    def framing(self) -> Framing:
        return SseDecoder()

    def parse_reply(self, data: Any) -> Parsed:
        problem = refused(data, "body is not an object")
        if problem is not None:
            return problem
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return malformed("no choices[0]")
        choice = choices[0]
        upstream = upstream_error(choice)
        if upstream is not None:
            return upstream
        message = choice.get("message")
        if not isinstance(message, dict):
            return malformed("no choices[0].message")
        return Parsed(
            content=message.get("content"),
            finish_reason=string(choice.get("finish_reason")),
            usage=_usage(data.get("usage")),
        )

    def parse_chunk(self, payload: str) -> Parsed:
        if payload.strip() == "[DONE]":
            return Parsed(end=True)
        data, decoded = decode_json(payload)
        problem = refused(data if decoded else None, "stream event is not a JSON object")  # or a mid-stream `error`
        if problem is not None:
            return problem
        usage = _usage(data.get("usage"))
        choices = data.get("choices")
        if not choices:  # a usage-only chunk, or an empty keep-alive
            return Parsed(usage=usage)
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            return malformed("no choices[0] in a stream chunk")
        choice = choices[0]
        upstream = upstream_error(choice)
        if upstream is not None:
            return upstream
        finish_reason = string(choice.get("finish_reason"))
        if finish_reason == "error":
            return Parsed(
                failure=Attempt(failure=FailureKind.UPSTREAM_ERROR, detail="stream ended with finish_reason error")
            )
        delta = choice.get("delta")
        content = delta.get("content") if isinstance(delta, dict) else None
        return Parsed(content=content, finish_reason=finish_reason, usage=usage)


def _usage(raw: Any) -> dict[str, int] | None:
    if not isinstance(raw, dict):
        return None
    return token_counts(
        prompt_tokens=raw.get("prompt_tokens"),
        completion_tokens=raw.get("completion_tokens"),
        total_tokens=raw.get("total_tokens"),
    )


class HostedProvider(OpenAICompatibleProvider):
    """A hosted OpenAI-compatible API: a key is required, and no decoding grammar is taken."""

    accepts_grammar = False
    needs_key = True
    # Each read of probabilities is a billed request: `LLM_DECIDE=auto` keeps the greedy path here
    # (`mass` asks anyway). A local server (`openai` with a base URL) bills nothing.
    billed_per_call = True


class OpenRouterProvider(HostedProvider):
    """OpenRouter: OpenAI wire format; upstream failures may arrive as 200 + ``error``."""

    name = "openrouter"
    default_base_url = "https://openrouter.ai/api/v1"
    default_model = "meta-llama/llama-3.3-70b-instruct"


class CerebrasProvider(HostedProvider):
    name = "cerebras"
    default_base_url = "https://api.cerebras.ai/v1"
    default_model = "llama-3.3-70b"


class ChutesProvider(HostedProvider):
    name = "chutes"
    default_base_url = "https://llm.chutes.ai/v1"
    default_model = "deepseek-ai/DeepSeek-V3-0324"
