"""`/api/memories`: the memory page's list, search, add, edit and delete (SPEC 17).

Memories are the facts `/remember` keeps for the user (`storage/memories.py`); this is where a
person reads and corrects them. A memory's text is bounded as the `/remember` tool bounds it
(`tools.memory.RememberInput`); search goes through the store's full-text index, so both
engines rank alike. Another user's memory id answers 404, exactly as a missing one (SPEC 3).
"""

from __future__ import annotations

from typing import Annotated

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from api.auth import current_user, require_user
from api.bodies import json_body
from api.database import get_db
from api.declare import Param, Reply, operation
from api.errors import ApiError, not_found
from api.services import services
from api.sessions import int_arg
from storage.memories import (
    Memory,
    add_memory,
    delete_memory,
    find_memory,
    get_memory,
    list_memories,
    search_memories,
    update_memory,
)

bp = Blueprint("memories", __name__, url_prefix="/api")
bp.before_request(require_user)

MAX_CONTENT_CHARS = 2000  # as `/remember`'s `fact` (tools/memory.py)
MAX_QUERY_CHARS = 500  # as `memory_search`'s `query`
DEFAULT_PAGE, MAX_PAGE = 50, 200

Content = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_CONTENT_CHARS)]
NOT_FOUND = Reply("no such memory of this user (another user's id answers the same)")


class MemoryBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    content: Content = Field(description=f"the fact, at most {MAX_CONTENT_CHARS} characters")


class NewMemory(MemoryBody):
    importance: int = Field(default=1, ge=1, le=10, description="1 (trivia) to 10 (essential), as `/remember`")


class MemoryPage(BaseModel):
    """Without `q`: newest first, paged with `before`; with `q`: the best matches first."""

    memories: list[Memory]
    has_more: bool


def owned(memory_id: int) -> Memory:
    found = get_memory(get_db(), current_user().id, memory_id)
    if found is None:
        raise not_found("memory")
    return found


@bp.get("/memories")
@operation(
    "The user's memories: newest first, or the best matches of `q`",
    replies={200: Reply("a page of memories", MemoryPage), 400: Reply("a bad `q`, `limit` or `before`")},
    params=(
        Param("q", "query", {"type": "string", "maxLength": MAX_QUERY_CHARS}, "words to look for (full-text)"),
        Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE}),
        Param("before", "query", {"type": "integer", "minimum": 1}, "only memories with a smaller id (without `q`)"),
    ),
)
def index() -> ResponseReturnValue:
    query = request.args.get("q", "").strip()
    if len(query) > MAX_QUERY_CHARS:
        raise ApiError(400, "invalid_request", f"q may hold at most {MAX_QUERY_CHARS} characters")
    limit = int_arg("limit", DEFAULT_PAGE, 1, MAX_PAGE) or DEFAULT_PAGE
    before = int_arg("before", None, 1, 2**62)
    conn, user_id = get_db(), current_user().id
    if query:
        found = search_memories(services().database, conn, user_id, query, limit + 1)
    else:
        found = list_memories(conn, user_id, limit + 1, before)
    page = MemoryPage(memories=found[:limit], has_more=len(found) > limit)
    return jsonify(page.model_dump(mode="json"))


@bp.post("/memories")
@operation(
    "Add a memory (an identical one already kept is answered instead, as `/remember` does)",
    body=NewMemory,
    replies={201: Reply("the new memory", Memory), 200: Reply("the identical memory already kept", Memory)},
)
def add() -> ResponseReturnValue:
    body: NewMemory = json_body(NewMemory, hint=': {"content": "a fact to keep"}')
    conn, user_id = get_db(), current_user().id
    existing = find_memory(conn, user_id, body.content)
    if existing is not None:
        return jsonify(existing.model_dump(mode="json")), 200
    return jsonify(add_memory(conn, user_id, body.content, body.importance).model_dump(mode="json")), 201


@bp.patch("/memories/<int:memory_id>")
@operation(
    "Replace a memory's text",
    body=MemoryBody,
    replies={200: Reply("the memory after the change", Memory), 404: NOT_FOUND},
)
def edit(memory_id: int) -> ResponseReturnValue:
    owned(memory_id)
    body: MemoryBody = json_body(MemoryBody, hint=': {"content": "the corrected fact"}')
    updated = update_memory(get_db(), current_user().id, memory_id, body.content)
    if updated is None:  # deleted in between
        raise not_found("memory")
    return jsonify(updated.model_dump(mode="json"))


@bp.delete("/memories/<int:memory_id>")
@operation("Delete a memory", replies={204: Reply("deleted", media=()), 404: NOT_FOUND})
def remove(memory_id: int) -> ResponseReturnValue:
    if not delete_memory(get_db(), current_user().id, memory_id):
        raise not_found("memory")
    return "", 204
