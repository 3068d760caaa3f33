"""`POST /chat`: validate the request, claim the session, then hand the turn to the pipeline.

Everything that may still refuse the message after the claim (a Retry of a message that is not
the chat's last, an image a full or read-only disk will not take) runs inside the claim's block,
which gives the claim back on any way out (`live/desk.py`)."""

from __future__ import annotations

import io
from collections.abc import Sequence
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
from api.turns import TurnAnswer, answer_turn, desk, turn_work
from pipeline.starts import Edit, NewMessage, Retry, TurnStart
from storage.connection import DbConnection
from storage.messages import Message, recent_messages, session_message
from storage.roles import USER
from storage.uploads import (
    MAX_IMAGE_BYTES,
    MAX_IMAGES_PER_TURN,
    ImageRejected,
    UploadsUnavailable,
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


def retried_message(conn: DbConnection, session_id: str, chat: ChatRequest, blobs: list[ImageSource]) -> Message:
    """The stored message a Retry answers again, so a retried message is stored once.

    Only the session's last message qualifies: a user message with the same text whose turn
    failed (nothing answered it). Checked under the claim, so no turn can add a message
    in between; a refusal gives the claim back with the block it is raised in."""
    last = recent_messages(conn, session_id, 1)
    if blobs:
        raise ApiError(400, "invalid_request", "a retry reuses the stored images; send none")
    if not last or last[0].id != chat.retry_of or last[0].role != USER:
        raise ApiError(
            409,
            "not_retryable",
            "retry_of must be this chat's last message, a user message that "
            "got no answer; send the text as a new message instead",
        )
    if last[0].content != chat.message:
        raise ApiError(400, "invalid_request", "a retry sends the same text as the message it retries")
    return last[0]


def edited_message(conn: DbConnection, session_id: str, chat: ChatRequest) -> Message | None:
    """The user message an edit makes a new version of (404 unless it is one of this chat's)."""
    if chat.edit_of is None:
        return None
    edited = session_message(conn, session_id, chat.edit_of)
    if edited is None:
        raise not_found("message")
    if edited.role != USER:
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
    with desk().claim(session.id, user_id=user.id) as claim:  # 409 turn_in_progress before anything is written
        start = turn_start(conn, session.id, chat_request, blobs, edited, user.id)
        return answer_turn(claim, turn_work(services, user.id, session.id, start))


def turn_start(
    conn: DbConnection,
    session_id: str,
    chat: ChatRequest,
    blobs: list[ImageSource],
    edited: Message | None,
    user_id: int,
) -> TurnStart:
    """How this message starts its turn (under the claim): a retry, an edit or a new message,
    its images saved (a disk that refuses them fails the request, and the claim is given back)."""
    if chat.retry_of is not None:
        return Retry(retried_message(conn, session_id, chat, blobs))
    meta = saved_images(user_id, blobs)
    if edited is None:
        return NewMessage(chat.message, meta)
    if meta is None and edited.meta and edited.meta.get("images"):
        meta = {"images": edited.meta["images"]}  # an edited text keeps the message's images
    return Edit(chat.message, edited.parent_id, meta)


def saved_images(user_id: int, blobs: Sequence[ImageSource]) -> dict[str, Any] | None:
    """Store a turn's images (checked already): the user message's `meta`, or None without any.
    A disk that refuses them answers 503 `storage_unavailable` and keeps nothing."""
    try:
        images = [save_image(app_services().settings.data_dir, user_id, image_bytes(blob)) for blob in blobs]
    except ImageRejected as error:
        raise ApiError(400, "invalid_image", str(error)) from error
    except UploadsUnavailable as error:
        raise ApiError(503, "storage_unavailable", f"{error}; nothing was stored, retry later") from error
    return {"images": [image.model_dump() for image in images]} if images else None
