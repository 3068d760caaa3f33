"""`POST /chat`: validate the request, claim the session, then hand the turn to the pipeline."""

from __future__ import annotations

import io
from typing import Any

from flask import Blueprint, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field
from werkzeug.datastructures import FileStorage

from api.auth import current_user, require_user
from api.bodies import json_object, validated
from api.database import get_db
from api.declare import JSON, NOT_FOUND, SSE, TURN_FAILED, Reply, budget, operation, session_links
from api.errors import ApiError, not_found
from api.services import services as app_services
from api.sessions import session_for
from api.turns import TurnAnswer, answer_turn, runner, turn_payload
from foundation.cancellation import CancelToken
from live.turns import TurnLease
from pipeline.turn import EventSink, Fork, run_turn
from storage.connection import DbConnection
from storage.messages import Message, recent_messages, session_message
from storage.uploads import (
    MAX_IMAGE_BYTES,
    MAX_IMAGES_PER_TURN,
    ImageRejected,
    decode_data_url,
    inspect_image,
    save_image,
)

bp = Blueprint("chat", __name__)
bp.before_request(require_user)

SESSION_NAME_CHARS = 60
TURN_STREAM = Reply(  # also the answer of a widget's (`api/tool_results.py`)
    "the turn's events (SPEC 7) ending with `done` (this JSON) or `error`",
    TurnAnswer,
    media=(JSON, SSE),
    links=session_links("/session_id"),
)


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(max_length=32_000)
    session_id: str | None = Field(default=None, max_length=64)
    images: list[str] = Field(default_factory=list, max_length=MAX_IMAGES_PER_TURN)
    retry_of: int | None = Field(default=None, ge=1)  # answer this stored user message again
    edit_of: int | None = Field(
        default=None, ge=1, le=2**62, description="a user message of this session: the new one is its new version"
    )


ImageSource = bytes | FileStorage  # a data URL's image, decoded; a multipart file, where Werkzeug spooled it


def image_bytes(source: ImageSource) -> bytes:
    """One image's bytes. A multipart file stays where Werkzeug's form parser put it (a
    temporary file past 500 KB) and is read only when needed, one at a time: a 48 MiB upload
    never sits in memory whole (JSON bodies, whose images are read and decoded whole, have a
    lower limit: `api/bodies.py`)."""
    if isinstance(source, bytes):
        return source
    stream = source.stream
    stream.seek(0, io.SEEK_END)
    if stream.tell() > MAX_IMAGE_BYTES:  # refused unread
        raise ImageRejected(f"image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MiB")
    stream.seek(0)
    return stream.read()


def parse_chat_request() -> tuple[ChatRequest, list[ImageSource]]:
    """JSON body (images as data URLs) or multipart (`images[]` files)."""
    sources: list[ImageSource] = []
    if request.mimetype == "multipart/form-data":
        files = request.files.getlist("images[]") + request.files.getlist("images")
        if len(files) > MAX_IMAGES_PER_TURN:
            raise ApiError(400, "invalid_request", f"at most {MAX_IMAGES_PER_TURN} images per message")
        raw: dict[str, Any] = {"message": request.form.get("message", "")}
        for name in ("session_id", "retry_of", "edit_of"):
            if request.form.get(name):
                raw[name] = request.form[name]
        sources += files
    else:
        raw = json_object()
    chat = validated(ChatRequest, raw)
    if not chat.message.strip():
        raise ApiError(400, "empty_message", "message must not be empty")
    if chat.retry_of is not None and chat.session_id is None:
        raise ApiError(400, "invalid_request", "retry_of needs the session_id of the chat it belongs to")
    if chat.edit_of is not None and (chat.session_id is None or chat.retry_of is not None):
        raise ApiError(400, "invalid_request", "edit_of needs the session_id of its chat, and no retry_of")
    try:
        sources += [decode_data_url(url) for url in chat.images]
        for source in sources:  # reject before anything (a session, a file) is written
            inspect_image(image_bytes(source))
    except ImageRejected as error:
        raise ApiError(400, "invalid_image", str(error)) from error
    return chat, sources


def retried_message(
    conn: DbConnection, session_id: str, chat: ChatRequest, blobs: list[ImageSource], lease: TurnLease
) -> Message | None:
    """The stored message a Retry answers again, so a retried message is stored once.

    Only the session's last message qualifies: a user message with the same text whose turn
    failed (nothing answered it). Checked after the claim, so no turn can add a message
    in between."""
    if chat.retry_of is None:
        return None
    last = recent_messages(conn, session_id, 1)
    problem = None
    if blobs:
        problem = ApiError(400, "invalid_request", "a retry reuses the stored images; send none")
    elif not last or last[0].id != chat.retry_of or last[0].role != "user":
        problem = ApiError(
            409,
            "not_retryable",
            "retry_of must be this chat's last message, a user message that "
            "got no answer; send the text as a new message instead",
        )
    elif last[0].content != chat.message:
        problem = ApiError(400, "invalid_request", "a retry sends the same text as the message it retries")
    if problem is not None:
        runner().live.turns.abandon(lease)
        raise problem
    return last[0]


def edited_message(conn: DbConnection, session_id: str, chat: ChatRequest) -> Message | None:
    """The user message an edit makes a new version of (404 unless it is one of this chat's)."""
    if chat.edit_of is None:
        return None
    edited = session_message(conn, session_id, chat.edit_of)
    if edited is None:
        raise not_found("message")
    if edited.role != "user":
        raise ApiError(400, "invalid_request", "edit_of must name a user message; regenerate an answer instead")
    return edited


@bp.post("/chat")
@operation(
    "Send a message and get the turn's answer (JSON, or SSE with `Accept: text/event-stream`)",
    body=ChatRequest,
    multipart=True,
    description=(
        "Without `session_id` a new session is created. `retry_of` answers a stored user message again. "
        "`edit_of` stores the message as a new version of that user message (same parent) and answers it "
        "there; the old version stays (SPEC 17)."
    ),
    replies={200: TURN_STREAM, 404: NOT_FOUND, **TURN_FAILED},
)
@budget("turns", by_view=("sessions",))  # a retry too: it calls the model again
def chat() -> ResponseReturnValue:
    chat_request, blobs = parse_chat_request()
    services = app_services().turns
    conn = get_db()
    user = current_user()
    session = session_for(chat_request.session_id, " ".join(chat_request.message.split())[:SESSION_NAME_CHARS])
    edited = edited_message(conn, session.id, chat_request)
    lease = runner().claim(session.id)  # 409 turn_in_progress before anything is written
    retried = retried_message(conn, session.id, chat_request, blobs, lease)
    try:
        images = [save_image(services.settings.data_dir, user.id, image_bytes(blob)) for blob in blobs]
    except ImageRejected as error:
        runner().live.turns.abandon(lease)
        raise ApiError(400, "invalid_image", str(error)) from error
    meta = {"images": [image.model_dump() for image in images]} if images else None
    if edited is not None and not images and edited.meta and edited.meta.get("images"):
        meta = {"images": edited.meta["images"]}  # an edited text keeps the message's images

    def work(conn: DbConnection, emit: EventSink, cancel: CancelToken) -> dict[str, Any]:
        result = run_turn(
            services,
            conn,
            user_id=user.id,
            session_id=session.id,
            text=chat_request.message,
            user_meta=meta,
            emit=emit,
            cancel=cancel,
            retry_of=retried,
            fork=Fork(edited.parent_id) if edited is not None else None,
        )
        return turn_payload(result)

    return answer_turn(lease, work)
