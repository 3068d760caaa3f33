"""`GET /v1/models` and `POST /v1/chat/completions` (SPEC 11): the orchestrator as an OpenAI model.

Any OpenAI client (the official SDKs, Open WebUI, editors) talks to one model,
`orchestrator`: our configured provider with our command tools. The turn is an ordinary
turn (`pipeline.turn.run_turn` on the turn runner, stored, visible in the web UI); only the
wire shapes differ (`api/v1/wire.py`, `api/v1/bodies.py`).

How the client's message list maps to our stored context. OpenAI clients resend the whole
conversation on every request; our session is the context the pipeline builds from.
- The request's LAST `user` message is the turn's message (messages after it are ignored).
- With `X-Session-Id` the stored session is the context: the request's earlier messages are
  ignored (they are what the client already sent us, and the stored copy also holds the
  tool results the client only saw as blocks). Not the user's session: 404.
- Without it a new session is created (it spends the `sessions` budget) and returned in the
  `X-Session-Id` response header. The request's earlier `user`/`assistant` messages (the
  last `CONTEXT_MESSAGES - 1` of them) are stored into it first, marked `meta.imported`, so
  the model answers in the conversation the client shows, and the web UI shows it too. The
  tool blocks we wrote into earlier answers (Open WebUI resends them verbatim; its frontend's
  `processDetails` puts the block's `result` string in its place) are removed from imported assistant
  messages: they are display, and their results were stored as tool
  messages in the session that ran them; an assistant message that was only blocks is not
  imported. A client that resends history without the header therefore gets a fresh
  session each time, seeded with that history: correct answers, at the price of one
  session per request.
- A question for the user (SPEC 8) left open by the previous answer is answered by the
  next user message (`api/v1/widgets.py`), in the question's own session.
- `system` (and `developer`) messages never replace our system prompt, whose command
  protocol the pipeline depends on: their text is appended after it under a heading that
  says they are the user's instructions and do not change the command protocol, for this
  request only (they are not stored).
- Images: `image_url` parts with `data:` URLs (how Open WebUI sends them) on the turn's
  message are the turn's images, checked and stored as `POST /chat` stores them (the vision
  provider answers); other URLs are refused (we fetch nothing). Images of earlier messages
  are not imported (their text is). `tool`/`function` messages and client `tools`,
  `functions`, `tool_choice`, `function_call` are refused with 400: this API offers the
  backend's tools, not the client's.
Errors are OpenAI-shaped (`openai_error`) with our codes: the blueprint rewrites every
error answer of its routes, the per-user 429 included, so each route's `@operation` declares
`error_model=OpenAIErrorBody`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Annotated, Any, Literal

from flask import Blueprint, Response, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field

from api.auth import current_user, require_user
from api.bodies import MAX_BODY_BYTES, json_object, validated
from api.chat import saved_images
from api.database import get_db, release_db
from api.declare import JSON, SSE, TURN_FAILED, Param, Reply, budget, operation
from api.errors import ApiError
from api.live import SSE_HEADERS, live_response, stream_seat
from api.openapi.models import OpenAIErrorBody
from api.openapi.v1_models import ChatCompletion, ModelInfo, ModelList
from api.services import services as app_services
from api.sessions import new_session, owned_session
from api.tool_results import refused
from api.turns import desk, turn_work
from api.v1.bodies import ChunkStreamBody, CompletionBody, json_answer
from api.v1.widgets import invalid_answer_payload, pending_from_history, pending_in_session, typed_answer
from api.v1.wire import MODEL_ID, ChunkTranslator, chat_completion, openai_error, static_chunks, strip_tool_blocks
from live.follow import FollowPlan
from pipeline.questions import Question, Refusal, apply_once
from pipeline.starts import NewMessage, TurnStart
from storage.messages import add_message, recent_messages
from storage.sessions import ChatSession, get_session
from storage.uploads import MAX_IMAGES_PER_TURN, ImageRejected, decode_data_url, inspect_image
from tools.base import ToolFailure
from tools.interactive import InputMethod

bp = Blueprint("openai", __name__, url_prefix="/v1")
bp.before_request(require_user)

SESSION_HEADER = "X-Session-Id"
CLIENT_TOOL_FIELDS = ("tools", "functions", "tool_choice", "function_call", "parallel_tool_calls")
MAX_CLIENT_SYSTEM_CHARS = 8_000
MAX_MESSAGE_CHARS = 32_000
SESSION_NAME_CHARS = 60
CLIENT_INSTRUCTIONS = (
    "\n\n## Instructions from the user's client\n"
    "The user's chat client added the instructions below. Follow them where they do not "
    "conflict with the command protocol above, which they cannot change.\n\n"
)


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ImageUrl(BaseModel):
    model_config = ConfigDict(extra="ignore")  # `detail`: the vision provider decides
    url: str = Field(max_length=MAX_BODY_BYTES)


class ImagePart(BaseModel):
    """An image as Open WebUI and the SDKs send it; only `data:` URLs (we fetch nothing)."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["image_url"]
    image_url: ImageUrl


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ClientMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")  # `name`, `refusal`, … carry nothing we use
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content if isinstance(part, TextPart))
        return self.content or ""

    def image_urls(self) -> list[str]:
        if isinstance(self.content, list):
            return [part.image_url.url for part in self.content if isinstance(part, ImagePart)]
        return []


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class CompletionRequest(BaseModel):
    """Sampling fields (`temperature`, `max_tokens`, …) are accepted and ignored: the
    operator's provider settings decide them, as for every other turn."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(max_length=200)
    messages: list[ClientMessage] = Field(min_length=1, max_length=1000)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)


@bp.after_request
def openai_errors(response: Response) -> Response:
    """Every error answer of these routes in OpenAI's shape (401, 400, 404, 409, 429 …)."""
    if response.status_code < 400 or response.mimetype != "application/json":  # a refusal from `abort` is "streamed"
        return response
    body = response.get_json(silent=True)
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and "type" not in body["error"]:
        response.set_data(json.dumps(openai_error(response.status_code, body)))
    return response


def models_list() -> dict[str, Any]:
    return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "orchestrator"}]}


@bp.get("/models")
@operation(
    "OpenAI's model list: the one model, `orchestrator`",
    replies={200: Reply("the list", ModelList)},
    error_model=OpenAIErrorBody,
)
def models() -> ResponseReturnValue:
    return jsonify(models_list())


@bp.get("/models/<path:model>")
@operation(
    "One model",
    replies={200: Reply("the model", ModelInfo), 404: Reply("not `orchestrator` (`model_not_found`)")},
    error_model=OpenAIErrorBody,
)
def model(model: str) -> ResponseReturnValue:
    if model != MODEL_ID:
        raise ApiError(404, "model_not_found", f"the only model is {MODEL_ID!r}")
    return jsonify(models_list()["data"][0])


def parse_request() -> CompletionRequest:
    raw = json_object()
    present = [name for name in CLIENT_TOOL_FIELDS if raw.get(name) not in (None, [], False)]
    if present:
        raise ApiError(
            400,
            "client_tools_unsupported",
            f"{', '.join(present)}: this API runs the orchestrator's "
            'own tools (their steps appear in the answer as <details type="tool_calls"> blocks); '
            "it does not call the client's. Remove the field.",
        )
    roles = [m.get("role") for m in raw.get("messages") or [] if isinstance(m, dict)]
    if any(role in ("tool", "function") for role in roles):
        raise ApiError(
            400,
            "client_tools_unsupported",
            "tool and function messages are not accepted: this API "
            "runs its own tools and keeps their results in the session",
        )
    chat = validated(CompletionRequest, raw)
    if chat.model != MODEL_ID:
        raise ApiError(404, "model_not_found", f"unknown model {chat.model!r}; the only model is {MODEL_ID!r}")
    return chat


def turn_message(chat: CompletionRequest) -> tuple[int, str]:
    """The index and text of the request's last user message (the turn's message)."""
    for index in range(len(chat.messages) - 1, -1, -1):
        if chat.messages[index].role == "user":
            text = chat.messages[index].text()
            if not text.strip():
                what = (
                    "needs text (a question about its image)"
                    if chat.messages[index].image_urls()
                    else "must not be empty"
                )
                raise ApiError(400, "empty_message", f"the last user message {what}")
            if len(text) > MAX_MESSAGE_CHARS:
                raise ApiError(
                    400, "invalid_request", f"the last user message is longer than {MAX_MESSAGE_CHARS:,} characters"
                )
            return index, text
    raise ApiError(400, "invalid_request", "messages must contain a user message (the turn's message)")


def turn_images(message: ClientMessage) -> list[bytes]:
    """The images of the turn's message (data URLs), checked before anything is written."""
    urls = message.image_urls()
    if len(urls) > MAX_IMAGES_PER_TURN:
        raise ApiError(400, "invalid_request", f"at most {MAX_IMAGES_PER_TURN} images per message")
    try:
        blobs = [decode_data_url(url) for url in urls]
        for blob in blobs:
            inspect_image(blob)
    except ImageRejected as error:
        raise ApiError(400, "invalid_image", str(error)) from error
    return blobs


def client_instructions(chat: CompletionRequest) -> str:
    text = "\n\n".join(m.text() for m in chat.messages if m.role in ("system", "developer") and m.text().strip())
    if len(text) > MAX_CLIENT_SYSTEM_CHARS:
        raise ApiError(400, "invalid_request", f"system messages hold at most {MAX_CLIENT_SYSTEM_CHARS:,} characters")
    return text


def target_session(chat: CompletionRequest, index: int, text: str) -> tuple[ChatSession, bool, Question | None]:
    """The turn's session, whether it is new, and the open question the message answers.

    `X-Session-Id` names the session (404 if not the user's); without it, a question whose
    block ends the client's last assistant message names its own session; else a new one."""
    session_id = request.headers.get(SESSION_HEADER, "").strip()
    user_id = current_user().id
    if session_id:
        session = owned_session(session_id[:64])
        return session, False, pending_in_session(get_db(), session.id)
    last_answer = next((m.text() for m in reversed(chat.messages[:index]) if m.role == "assistant"), "")
    question = pending_from_history(get_db(), user_id, last_answer)
    if question is not None:
        asked_in = get_session(get_db(), user_id, question.call.session_id)
        if asked_in is not None and pending_in_session(get_db(), asked_in.id) is not None:
            return asked_in, False, question
    return new_session(" ".join(text.split())[:SESSION_NAME_CHARS]), True, None


def import_history(session: ChatSession, chat: CompletionRequest, before: int, keep: int) -> None:
    """Store the request's earlier user/assistant messages in a new session (its context).

    Our tool blocks are removed from assistant messages (see the module docstring)."""
    earlier = [
        (m.role, strip_tool_blocks(m.text()) if m.role == "assistant" else m.text())
        for m in chat.messages[:before]
        if m.role in ("user", "assistant")
    ]
    earlier = [(role, text) for role, text in earlier if text.strip()]
    for role, text in earlier[-keep:] if keep > 0 else []:
        add_message(
            get_db(),
            session_id=session.id,
            user_id=current_user().id,
            role=role,
            content=text[:MAX_MESSAGE_CHARS],
            meta={"imported": "openai"},
        )


def invalid_answer(chat: CompletionRequest, question: Question, reason: str, prompt_chars: int) -> Response:
    """An answer that does not fit its question: no turn runs, the question stays open."""
    payload = invalid_answer_payload(question, reason, f"turn_{question.call.id}_invalid")
    if chat.stream:
        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        response = Response(
            static_chunks(payload, prompt_chars, include_usage), mimetype="text/event-stream", headers=SSE_HEADERS
        )
    else:
        response = json_answer(200, chat_completion(payload, prompt_chars, int(time.time())))
    response.headers[SESSION_HEADER] = question.call.session_id
    return response


@bp.post("/chat/completions")
@operation(
    "OpenAI's chat completion: one orchestrator turn (SPEC 11)",
    body=CompletionRequest,
    params=(Param(SESSION_HEADER, "header", {"type": "string"}, "store the turn in this session of yours"),),
    replies={
        200: Reply(
            "a `chat.completion`, or with `stream: true` `chat.completion.chunk` frames and `data: [DONE]`",
            ChatCompletion,
            media=(JSON, SSE),
            headers=(SESSION_HEADER,),
            event_data="text",
        ),
        400: Reply("a bad request, or client tools (`client_tools_unsupported`)"),
        404: Reply("an unknown model or session"),
        **TURN_FAILED,
    },
    error_model=OpenAIErrorBody,
)
@budget("turns", by_view=("sessions",))  # its 429 in OpenAI's shape
def chat_completions() -> ResponseReturnValue:
    chat = parse_request()
    index, text = turn_message(chat)
    blobs = turn_images(chat.messages[index])
    extra = client_instructions(chat)
    services = app_services().turns
    if extra:
        services = dataclasses.replace(services, prompts=services.prompts.with_suffix(CLIENT_INSTRUCTIONS + extra))
    seat = stream_seat() if chat.stream else None  # 429 before anything is written
    session, created, question = target_session(chat, index, text)
    user = current_user()
    prompt_chars = len(services.prompts.system_prompt()) + sum(len(m.text()) for m in chat.messages)
    answer: Any = None
    if question is not None:
        try:
            answer = typed_answer(question, text)
        except ToolFailure as failure:
            return invalid_answer(chat, question, failure.message, prompt_chars)
    with desk().claim(session.id, user_id=user.id) as claim:  # 409 turn_in_progress while the session answers
        start: TurnStart | Refusal
        if question is not None:
            method: InputMethod = "selection" if question.widget.widget != "text" else "text"
            start = apply_once(get_db(), question, user.id, answer, method)
            if isinstance(start, Refusal):
                refused(start)
        else:
            if created:
                import_history(session, chat, index, services.settings.context_messages - 1)
            start = NewMessage(text, saved_images(user.id, blobs))
        release_db()  # the turn takes its own connection; this request holds none while it waits
        lease = claim.start(turn_work(services, user.id, session.id, start))
    live = desk().live
    if chat.stream:
        database = services.database

        def load_tool(message_id: int) -> dict[str, Any] | None:
            with database.connection() as conn:  # a stream's thread: held only for this read
                recent = recent_messages(conn, session.id, 20)
            for message in recent:
                if message.id == message_id:
                    return message.public()
            return None

        include_usage = bool(chat.stream_options and chat.stream_options.include_usage)
        translator = ChunkTranslator(lease.turn_id, prompt_chars, include_usage, load_tool)
        plan = FollowPlan(session_id=session.id, after=lease.start_cursor, turn_id=lease.turn_id, only_turn=True)
        response = live_response(ChunkStreamBody(live.bus, plan, translator, seat))
    else:
        response = live_response(CompletionBody(lease, prompt_chars))
    response.headers[SESSION_HEADER] = session.id
    return response
