"""The answers of `/v1/*` (SPEC 11) as models, for `GET /openapi.json` only.

`api/v1/wire.py` builds these answers as dicts in OpenAI's published shapes; these
models describe the same fields, and `tests/api/test_openapi.py` checks real answers against
them, so the two cannot drift apart unnoticed.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ModelInfo(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelInfo]


class AssistantMessage(BaseModel):
    role: Literal["assistant"]
    content: str
    refusal: None


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop"]
    logprobs: None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    """Tool steps appear in `content` as Open WebUI's `<details type="tool_calls">` blocks."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
