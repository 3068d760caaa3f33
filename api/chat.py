"""`POST /chat`: validate the request, then hand the turn to the pipeline."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

from flask import Blueprint, current_app, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.auth import current_user, require_user
from api.database import get_db
from api.errors import ApiError, not_found, validation_error
from api.sse import event_stream, sse_response, wants_event_stream
from events.bus import EventBus
from pipeline.turn import ProviderUnavailable, TurnServices, run_turn
from storage.sessions import create_session, get_session
from storage.uploads import MAX_IMAGES_PER_TURN, ImageRejected, decode_data_url, inspect_image, save_image

bp = Blueprint("chat", __name__)
bp.before_request(require_user)

SESSION_NAME_CHARS = 60


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(max_length=32_000)
    session_id: str | None = Field(default=None, max_length=64)
    images: list[str] = Field(default_factory=list, max_length=MAX_IMAGES_PER_TURN)


def parse_chat_request() -> tuple[ChatRequest, list[bytes]]:
    """JSON body (images as data URLs) or multipart (`images[]` files)."""
    if request.mimetype == "multipart/form-data":
        files = request.files.getlist("images[]") + request.files.getlist("images")
        if len(files) > MAX_IMAGES_PER_TURN:
            raise ApiError(400, "invalid_request", f"at most {MAX_IMAGES_PER_TURN} images per message")
        raw: dict[str, Any] = {"message": request.form.get("message", "")}
        if request.form.get("session_id"):
            raw["session_id"] = request.form["session_id"]
        blobs = [file.read() for file in files]
    else:
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            raise ApiError(400, "invalid_json", "the body must be a JSON object")
        raw, blobs = body, []
    try:
        chat = ChatRequest.model_validate(raw)
    except ValidationError as error:
        raise validation_error(error) from error
    if not chat.message.strip():
        raise ApiError(400, "empty_message", "message must not be empty")
    try:
        blobs += [decode_data_url(url) for url in chat.images]
        for blob in blobs:  # reject before anything (a session, a file) is written
            inspect_image(blob)
    except ImageRejected as error:
        raise ApiError(400, "invalid_image", str(error)) from error
    return chat, blobs


def run_and_publish(
    services: TurnServices, bus: EventBus, conn: sqlite3.Connection, *, user_id: int, session_id: str,
    text: str, meta: dict[str, Any] | None,
) -> tuple[int, dict[str, Any]]:
    """Run the turn with its events on the session's bus; end with `done` or a terminal `error`.

    Returns the HTTP status and the JSON answer; the terminal event carries the same JSON,
    so a streaming client and a plain one see one answer.
    """

    def emit(name: str, data: dict[str, Any]) -> None:
        bus.publish(session_id, name, data)

    try:
        result = run_turn(services, conn, user_id=user_id, session_id=session_id, text=text, user_meta=meta, emit=emit)
    except ProviderUnavailable as failure:
        detail = failure.completion
        error = ApiError(
            502,
            "provider_unavailable",
            f"the model provider did not answer ({detail.provider}: {detail.failure}); your message was kept, retry later",
            extra={"user_message_id": failure.user_message_id, "session_id": session_id},
        )
        bus.publish(session_id, "error", {**error.to_dict(), "status": 502})
        return 502, error.to_dict()
    payload = {
        "session_id": result.session_id,
        "reply": result.reply,
        "messages": [message.public() for message in result.messages],
        "tool": result.tool.model_dump(exclude_none=True) if result.tool else None,
    }
    bus.publish(session_id, "done", payload)
    return 200, payload


@bp.post("/chat")
def chat():  # type: ignore[no-untyped-def]
    chat_request, blobs = parse_chat_request()
    services: TurnServices = current_app.extensions["turn_services"]
    bus: EventBus = current_app.extensions["events"]
    conn = get_db()
    user = current_user()
    if chat_request.session_id is None:
        session = create_session(conn, user.id, " ".join(chat_request.message.split())[:SESSION_NAME_CHARS])
    else:
        session = get_session(conn, user.id, chat_request.session_id)
        if session is None:
            raise not_found("session")
    try:
        images = [save_image(services.settings.data_dir, user.id, blob) for blob in blobs]
    except ImageRejected as error:
        raise ApiError(400, "invalid_image", str(error)) from error
    meta = {"images": [image.model_dump() for image in images]} if images else None
    turn = {"user_id": user.id, "session_id": session.id, "text": chat_request.message, "meta": meta}
    if wants_event_stream():
        return sse_response(stream_turn(services, bus, turn))
    status, payload = run_and_publish(services, bus, conn, **turn)
    return jsonify(payload), status


def stream_turn(services: TurnServices, bus: EventBus, turn: dict[str, Any]) -> Iterator[str]:
    """Run the turn on its own thread (with its own connection) and stream its events.

    The subscription starts at the bus position before the turn, so no event of this turn
    is missed; the thread is not a daemon, so a shutting-down server finishes the turn and
    stores its messages before exiting.
    """
    after = bus.last_id(turn["session_id"])

    def work() -> None:
        with services.database.connection() as conn:
            run_and_publish(services, bus, conn, **turn)

    threading.Thread(target=work, name=f"turn-{turn['session_id'][:8]}").start()
    return event_stream(bus, turn["session_id"], after)
