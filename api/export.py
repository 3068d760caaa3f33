"""Export a chat (`GET /sessions/<id>/export?format=markdown|json`) and import a JSON export
as a new chat (`POST /sessions/import`).

The JSON export is a versioned document (`ChatExport`): `format` "orchestrator.chat",
`version` 1, the session's name and times, and every message the chat shows, oldest first,
with its role, content, time and `meta` (tool results included, as data). It is streamed
message by message (`storage.chat_transfer`), so a long chat never sits in memory whole.

An import is untrusted input that becomes stored rows, so it is bounded and cleaned here:

- at most `IMPORT_MAX_BYTES` of JSON (the app's body cap), `IMPORT_MAX_VALUES` JSON values,
  `IMPORT_MAX_MESSAGES` messages, each within SPEC 12's sizes (`MAX_CONTENT_CHARS` of
  content, `MAX_META_BYTES` of meta);
- roles are what the product stores: `user`, `assistant`, `<tool>_tools` (never `system`);
- no `meta` key can grant anything: a user message's meta (image paths into the uploads) is
  dropped, an answer keeps only `stopped`, a tool result keeps only `ToolMeta`'s own keys, and
  an interactive call (a question, an approval) is closed: marked `answered` and `imported`,
  with a new `tool_call_id`, so no imported row can be answered or run a command;
- ids in the document (the session's, the messages') are ignored: the import is always a new
  session of the caller;
- each import spends one of the user's `imports` budget (RATE_LIMITS) and one `sessions`.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from flask import Blueprint, Response, jsonify, request, stream_with_context
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from api.auth import current_user, require_user
from api.bodies import refuse_cut_body, validated
from api.bounded_json import Decoded, Limits, decode
from api.database import get_db
from api.declare import NOT_FOUND, Param, Reply, budget, operation, session_links
from api.errors import ApiError
from api.sessions import new_session, owned_session
from storage.chat_transfer import ChatTooLong, chat_message_ids, import_rows, messages_in_order
from storage.db import utc_now
from storage.messages import Message
from storage.roles import ASSISTANT, TOOLS_SUFFIX, USER
from storage.sessions import ChatSession
from tools.meta import UI_PENDING, ToolMeta

bp = Blueprint("export", __name__)
bp.before_request(require_user)

FORMAT = "orchestrator.chat"
VERSION = 1
EXPORT_MAX_MESSAGES = 50_000  # a chat longer than this is refused (it is read twice, streamed)
IMPORT_MAX_BYTES = 8 * 1024 * 1024  # the app's JSON body cap (api/bodies.py MAX_BODY_BYTES)
IMPORT_MAX_VALUES = 400_000  # JSON values in one import (tables in tool results are many)
IMPORT_MAX_MESSAGES = 5_000
MAX_CONTENT_CHARS = 64 * 1024  # a stored tool result's contract text (SPEC 12); answers fit too
MAX_META_BYTES = 256 * 1024  # a stored tool result's meta (SPEC 12)
TOOL_ROLE = r"[a-z][a-z0-9_]{0,40}_tools"
ROLE = rf"^(user|assistant|{TOOL_ROLE})$"
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)$")


# ---------------------------------------------------------------- the document


class ExportedSession(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(default=None, max_length=100, description="ignored on import")
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]
    created_at: str | None = Field(default=None, max_length=40)
    updated_at: str | None = Field(default=None, max_length=40)


class ExportedMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str = Field(pattern=ROLE, description="`user`, `assistant` or a tool role (`memory_tools`)")
    content: str = Field(max_length=MAX_CONTENT_CHARS)
    created_at: str | None = Field(default=None, max_length=40)
    meta: dict[str, Any] | None = None


class ChatExport(BaseModel):
    """A chat as `GET /sessions/<id>/export?format=json` writes it and `POST /sessions/import` reads it."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["orchestrator.chat"]
    version: Literal[1]
    exported_at: str | None = Field(default=None, max_length=40)
    session: ExportedSession
    messages: list[ExportedMessage] = Field(max_length=IMPORT_MAX_MESSAGES)


class Imported(BaseModel):
    session: ChatSession
    messages: int = Field(description="how many messages were stored")


# ---------------------------------------------------------------- export


def exported_message(message: Message) -> dict[str, Any]:
    row: dict[str, Any] = {"role": message.role, "content": message.content, "created_at": message.created_at}
    if message.meta is not None:
        row["meta"] = message.meta
    return row


def json_document(session: ChatSession, messages: Iterator[Message]) -> Iterator[str]:
    head = {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": utc_now(),
        "session": {
            "id": session.id,
            "name": session.name,
            "created_at": session.created_at,
            "updated_at": session.updated_at,
        },
    }
    yield json.dumps(head, ensure_ascii=False)[:-1] + ', "messages": ['
    for index, message in enumerate(messages):
        yield ("," if index else "") + "\n" + json.dumps(exported_message(message), ensure_ascii=False)
    yield "\n]}\n"


def fenced(text: str, info: str = "") -> str:
    """`text` in a code fence longer than any run of backticks inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def markdown_message(message: Message) -> str:
    if message.role == USER:
        return f"## You · {message.created_at}\n\n{message.content}\n"
    if message.role == ASSISTANT:
        return f"## Assistant · {message.created_at}\n\n{message.content}\n"
    meta = message.meta or {}
    command = meta.get("command_line") or f"/{meta.get('command') or message.role.removesuffix(TOOLS_SUFFIX)}"
    status = (
        "" if meta.get("ok") is None else (" (ok)" if meta.get("ok") else f" (failed: {meta.get('code') or 'error'})")
    )
    return f"## Tool · {message.created_at}\n\n{fenced(str(command), 'text')}\n\nResult{status}:\n\n{fenced(message.content, 'text')}\n"


def markdown_document(session: ChatSession, messages: Iterator[Message]) -> Iterator[str]:
    yield f"# {session.name}\n\n_Exported {utc_now()}; started {session.created_at}._\n"
    for message in messages:
        yield "\n" + markdown_message(message)


def attachment_name(session: ChatSession, extension: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", session.name).strip("-")[:60] or "chat"
    return f"{slug}.{extension}"


@bp.get("/sessions/<session_id>/export")
@operation(
    "Download a chat as Markdown or as a JSON document (which POST /sessions/import reads)",
    replies={
        200: Reply("the chat, as an attachment", media=("application/json", "text/markdown")),
        400: Reply("an unknown `format`"),
        404: NOT_FOUND,
        413: Reply("the chat is longer than an export takes (`chat_too_long`)"),
    },
    params=(Param("format", "query", {"type": "string", "enum": ["markdown", "json"], "default": "json"}),),
)
def export(session_id: str) -> ResponseReturnValue:
    session = owned_session(session_id)
    kind = request.args.get("format", "json")
    if kind not in ("markdown", "json"):
        raise ApiError(400, "invalid_request", "format must be markdown or json")
    conn = get_db()
    try:
        ids = chat_message_ids(conn, session_id, EXPORT_MAX_MESSAGES)
    except ChatTooLong as error:
        raise ApiError(413, "chat_too_long", f"{error}; an export takes at most {EXPORT_MAX_MESSAGES}") from None
    messages = messages_in_order(conn, session_id, ids)
    if kind == "json":
        body, mimetype, extension = json_document(session, messages), "application/json", "json"
    else:
        body, mimetype, extension = markdown_document(session, messages), "text/markdown", "md"
    response = Response(stream_with_context(body), mimetype=mimetype)
    response.headers["Content-Disposition"] = f'attachment; filename="{attachment_name(session, extension)}"'
    response.headers["Cache-Control"] = "no-store"
    return response


# ---------------------------------------------------------------- import


def clean_meta(role: str, meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The meta an imported row may keep (see the module docstring)."""
    if meta is None:
        return None
    if len(json.dumps(meta)) > MAX_META_BYTES:
        raise ApiError(400, "invalid_request", f"a message's meta is larger than {MAX_META_BYTES // 1024} KiB")
    if role == USER:
        return None
    if role == ASSISTANT:
        return {"stopped": True} if meta.get("stopped") is True else None
    try:
        tool = ToolMeta.model_validate(meta)
    except ValidationError as error:
        raise ApiError(
            400, "invalid_request", f"a tool result's meta is not valid: {error.errors()[0]['msg']}"
        ) from None
    kept = {key: value for key, value in tool.stored().items() if key in ToolMeta.model_fields}
    if "tool_call_id" in kept:
        kept["tool_call_id"] = f"imported-{uuid.uuid4().hex}"  # never the id of a live call
    if kept.get("kind") == UI_PENDING or "status" in kept:
        kept["status"] = "answered"  # closed: nobody can answer it (SPEC 8)
    kept["imported"] = True
    return kept


def import_body() -> ChatExport:
    refuse_cut_body()
    outcome = decode(request.get_data(cache=False), Limits(max_items=IMPORT_MAX_VALUES))
    if not isinstance(outcome, Decoded):
        raise ApiError(400, "invalid_json", outcome.message)
    if not isinstance(outcome.value, dict):
        raise ApiError(400, "invalid_json", "the body must be a chat export (a JSON object)")
    return validated(ChatExport, outcome.value)


@bp.post("/sessions/import")
@operation(
    "Import a JSON chat export as a new chat",
    body=ChatExport,
    description=(
        f"At most {IMPORT_MAX_MESSAGES} messages and {IMPORT_MAX_BYTES // 1024 // 1024} MiB; interactive calls "
        "are imported closed, and no meta key grants anything."
    ),
    replies={201: Reply("the new chat", Imported, links=session_links("/session/id"))},
)
@budget("imports", by_view=("sessions",))
def import_chat() -> ResponseReturnValue:
    document = import_body()
    rows = [
        (
            message.role,
            message.content,
            message.created_at if message.created_at and TIME.match(message.created_at) else utc_now(),
            clean_meta(message.role, message.meta),
        )
        for message in document.messages
    ]
    session = new_session(document.session.name)
    stored = import_rows(get_db(), session_id=session.id, user_id=current_user().id, rows=rows)
    return jsonify(Imported(session=session, messages=stored).model_dump(mode="json")), 201
