"""Ollama's native chat API (`/api/chat`), not its OpenAI shim: images go in the native
`images` field and error bodies are Ollama's own `{"error": "..."}`.

Its stream is newline-delimited JSON: one object per piece, the last one with
`"done": true`, the finish reason and the token counts. The answer's length is bounded by
`options.num_predict` (`LLM_MAX_TOKENS`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llm.base import ChatMessage
from llm.framing import Framing, NdjsonDecoder
from llm.http import HttpProvider
from llm.wire import Parsed, decode_json, malformed, refused, string, token_counts


class OllamaProvider(HttpProvider):
    """Ollama (`/api/chat`): NDJSON stream, raw base64 images, no key."""

    name = "ollama"
    needs_key = False
    default_base_url = "http://127.0.0.1:11434"
    default_model = "qwen2.5:7b"

    probe_path = "/api/tags"
    stream_types = ("application/x-ndjson", "application/ndjson")

    def endpoint(self) -> str:
        return f"{self.base_url}/api/chat"

    def request_body(self, messages: Sequence[ChatMessage], grammar: str | None = None) -> dict[str, Any]:
        wire: list[dict[str, Any]] = []
        for message in messages:
            item: dict[str, Any] = {"role": message.role, "content": message.content}
            if message.images:
                item["images"] = [_strip_data_url(image) for image in message.images]
            wire.append(item)
        options: dict[str, Any] = {"num_predict": self.config.max_tokens}
        options.update(self.config.sampling())
        return {"model": self.model, "messages": wire, "stream": True, "options": options}

    def framing(self) -> Framing:
        return NdjsonDecoder()

    def parse_reply(self, data: Any) -> Parsed:
        problem = refused(data, "body is not an object")
        if problem is not None:
            return problem
        message = data.get("message")
        if not isinstance(message, dict):
            return malformed("no message object")
        return Parsed(content=message.get("content"), finish_reason=string(data.get("done_reason")), usage=_usage(data))

    def parse_chunk(self, payload: str) -> Parsed:
        data, decoded = decode_json(payload)
        problem = refused(data if decoded else None, "stream line is not a JSON object")
        if problem is not None:
            return problem
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if data.get("done") is not True:
            return Parsed(content=content)
        return Parsed(content=content, end=True, finish_reason=string(data.get("done_reason")), usage=_usage(data))


def _usage(data: dict[str, Any]) -> dict[str, int] | None:
    return token_counts(prompt_tokens=data.get("prompt_eval_count"), completion_tokens=data.get("eval_count"))


def _strip_data_url(image: str) -> str:
    """Ollama wants raw base64; our messages carry data URLs."""
    if image.startswith("data:") and "," in image:
        return image.split(",", 1)[1]
    return image
