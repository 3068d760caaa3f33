"""`GET /search?q=&limit=`: the user's messages across all of their chats that match `q`
(the engine's full-text index, `storage.chat_search`); another user's never appear."""

from __future__ import annotations

from flask import Blueprint, jsonify, request
from flask.typing import ResponseReturnValue
from pydantic import BaseModel

from api.auth import current_user, require_user
from api.database import database, get_db
from api.declare import Param, Reply, operation
from api.errors import ApiError
from api.sessions import int_arg
from storage.chat_search import ChatHit, search_chats

bp = Blueprint("search", __name__)
bp.before_request(require_user)

MAX_QUERY_CHARS = 500
DEFAULT_LIMIT = 20
MAX_LIMIT = 50


class SearchResults(BaseModel):
    results: list[ChatHit]


@bp.get("/search")
@operation(
    "Search the user's chats (best matches first)",
    replies={
        200: Reply("the matching messages, each with its chat", SearchResults),
        400: Reply("no `q`, or a bad `limit`"),
    },
    params=(
        Param("q", "query", {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS}, "the words to find"),
        Param("limit", "query", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}),
    ),
)
def search() -> ResponseReturnValue:
    text = request.args.get("q", "")
    if not text.strip() or len(text) > MAX_QUERY_CHARS:
        raise ApiError(400, "invalid_request", f"q must hold 1 to {MAX_QUERY_CHARS} characters")
    limit = int_arg("limit", DEFAULT_LIMIT, 1, MAX_LIMIT) or DEFAULT_LIMIT
    hits = search_chats(database(), get_db(), current_user().id, text, limit)
    return jsonify(SearchResults(results=hits).model_dump(mode="json"))
