"""Wire models shared by several endpoints: the error bodies and the public `Message`.

They exist so that `GET /openapi.json` is generated from what handlers really send: a
handler builds its answer through a model (`Model(...).model_dump(mode="json",
exclude_unset=True)`), the document takes the same model's JSON schema. `exclude_unset`
keeps the wire as it always was: an optional field the handler did not set (a message's
`meta`, a tool summary's `code`) is left out rather than sent as `null`.

The error bodies here only describe answers built elsewhere (`api/errors.py`, the tools'
task style of SPEC 10, OpenAI's shape of SPEC 11); they are not used to build them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from storage.messages import Message


class ErrorDetail(BaseModel):
    code: str = Field(description="machine-readable, stable: `not_found`, `invalid_request`, `rate_limited`, …")
    message: str = Field(description="what went wrong and, where it can, how to fix the request")
    details: JsonValue = Field(default=None, description="field errors of a 400, the limit of a 429, …")


class ErrorBody(BaseModel):
    """Every error of the API but `/v1/*` and the task tools (SPEC 4). Some answers add fields
    beside `error`: `turn_id` on 409 `turn_in_progress`, `session_id` and `user_message_id`
    when a turn failed after storing the user's message."""

    model_config = ConfigDict(extra="allow")
    error: ErrorDetail


class TaskErrorBody(BaseModel):
    """The error of a learner-task tool at `POST /tools/<name>` (SPEC 10)."""

    success: Literal[False]
    error_code: str
    message: str


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = Field(
        description="`invalid_request_error`, `authentication_error`, `rate_limit_error`, `server_error` …"
    )
    code: str | None = Field(description="our error code (`model_not_found`, `client_tools_unsupported`, …)")
    param: None = None
    details: JsonValue = None


class OpenAIErrorBody(BaseModel):
    """Errors of `/v1/*` in OpenAI's shape (SPEC 11)."""

    model_config = ConfigDict(extra="allow")
    error: OpenAIErrorDetail


class Versions(BaseModel):
    """A message's place among its versions (its siblings: the messages with the same parent)."""

    index: int = Field(description="1-based position of this message among `ids`")
    count: int
    ids: list[int] = Field(description="the versions' ids, oldest first; POST /sessions/<id>/branch shows one")


class MessageOut(BaseModel):
    """A stored message as clients see it (SPEC 4 `Message`); `meta` only when present."""

    id: int
    session_id: str
    role: str = Field(description="`user`, `assistant`, or a tool role such as `memory_tools`")
    content: str
    created_at: str = Field(description="ISO-8601 UTC with milliseconds")
    parent_id: int | None = Field(default=None, description="the message this one follows (null: a first message)")
    meta: dict[str, Any] | None = Field(
        default=None,
        description="`turn_error` {code, message, details?} on a user message whose turn failed (Retry); "
        "`answered_by` {provider, model} on an answer: the model that wrote it",
    )
    versions: Versions | None = Field(
        default=None, description="GET …/messages only, where the message has other versions (edit, regenerate)"
    )


def public_messages(messages: Iterable[Message]) -> list[MessageOut]:
    return [MessageOut.model_validate(message.public()) for message in messages]


class FunctionSpec(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any] = Field(description="the JSON schema of the tool's input model")


class FunctionSchema(BaseModel):
    type: Literal["function"]
    function: FunctionSpec


class FunctionList(BaseModel):
    """`GET /tools`: every tool as an OpenAI-compatible function schema."""

    tools: list[FunctionSchema]
