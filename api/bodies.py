"""Reading JSON request bodies: one object, validated by a pydantic model, or a 400.

Handlers read a JSON body here and nowhere else: `json_object` (the object, or 400
`invalid_json`), `validated` (a pydantic model, or 400 `invalid_request` with details) and
`json_body` (both). Every JSON body of the app is decoded by `api/bounded_json.py`: Flask gives each
request the app's JSON provider as its JSON module, and `create_app` installs
`BoundedJSONProvider`. A body nested too deep, holding too many values or a lone surrogate
answers 400 `invalid_json` with what to fix, even for callers that pass `silent=True`; a
body that is merely not JSON stays a `ValueError`, so each endpoint keeps its own answer.

Size: a JSON body is read whole before it is parsed (Werkzeug's `get_data`), and a 40 MB body
of one JSON string cost the server 114 MB on its way to a 400 (a 48 MiB `POST /chat` of data
URLs: 139 MB at its peak, 60 MB still resident after). So every JSON body is capped low:
`MAX_BODY_BYTES`, and `MAX_JSON_IMAGES_BYTES` for the endpoints that take images as data
URLs (`LARGE_BODIES`). Only a multipart body reaches the app's `MAX_CONTENT_LENGTH` (four
10 MiB images): Werkzeug's form parser spools its files to temporary files (past 500 KB) and
keeps at most `MAX_FORM_MEMORY_SIZE` of its other fields in memory, and `api/chat.py` reads
the images one at a time. A body over its limit answers 413 `payload_too_large` before it is
read.
"""

from __future__ import annotations

from typing import Any, TypeVar

from flask import Flask, current_app, request
from flask.json.provider import DefaultJSONProvider
from pydantic import BaseModel, ValidationError

from api.bounded_json import MALFORMED, Decoded, decode
from api.errors import ApiError, validation_error

ModelT = TypeVar("ModelT", bound=BaseModel)

# /run takes 1 MiB of files and 1 MiB of stdin; JSON escapes (`\u4e2d`) can double that
MAX_BODY_BYTES = 8 * 1024 * 1024
# a 10 MiB image is 13.4 MiB as a data URL; larger uploads go multipart. Decoding holds about
# three copies of a JSON body (its bytes, the strings, the images' bytes)
MAX_JSON_IMAGES_BYTES = 16 * 1024 * 1024
LARGE_BODIES = frozenset({"chat.chat"})  # endpoints that take images (as data URLs, or multipart files)


class BoundedJSONProvider(DefaultJSONProvider):
    """Flask's JSON provider whose `loads` (what `request.get_json` calls) keeps the limits of
    `api/bounded_json.py`; `dumps` and `response` are Flask's own."""

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        outcome = decode(s)
        if isinstance(outcome, Decoded):
            return outcome.value
        if outcome.code == MALFORMED:
            raise ValueError(outcome.message)  # Werkzeug's usual path for a body that is not JSON
        raise ApiError(400, "invalid_json", outcome.message)


def install(app: Flask) -> None:
    """Every request body of `app` read within the limits above."""
    app.json = BoundedJSONProvider(app)
    app.before_request(limit_body_size)


def limit_body_size() -> None:
    """`before_request`: the body limit of this request's endpoint (Flask 3.1 takes it per request)."""
    if request.endpoint not in LARGE_BODIES:
        cap = MAX_BODY_BYTES
    elif request.mimetype == "multipart/form-data":
        return  # the app's MAX_CONTENT_LENGTH; its files are spooled to disk
    else:
        cap = MAX_JSON_IMAGES_BYTES
    app_limit = current_app.config.get("MAX_CONTENT_LENGTH")
    limit = cap if app_limit is None else min(app_limit, cap)
    request.max_content_length = limit  # also bounds a body sent without Content-Length
    if request.content_length is not None and request.content_length > limit:
        raise ApiError(
            413,
            "payload_too_large",
            f"the body has {request.content_length} bytes; this endpoint takes at most {limit // 1024 // 1024} MiB",
        )


def refuse_cut_body() -> None:
    """413 for a body sent without Content-Length (chunked) that reached the endpoint's limit.

    Werkzeug reads such a body up to `request.max_content_length` and stops there without a
    word, so the app would parse a cut body and answer a puzzling 400; the limit is reached
    exactly when the read stopped at it."""
    if request.content_length is not None:
        return
    request.get_data()  # read (and cached) up to the limit
    if getattr(request.stream, "is_exhausted", False):
        limit = request.max_content_length or 0
        raise ApiError(
            413, "payload_too_large", f"the body is larger than this endpoint takes ({limit // 1024 // 1024} MiB)"
        )


def json_object(*, optional: bool = False, hint: str = "") -> dict[str, Any]:
    """The body as a JSON object (`{}` for an empty body when `optional`), else 400 invalid_json."""
    refuse_cut_body()
    body = request.get_json(silent=True)
    if body is None and optional and not request.get_data():
        body = {}
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", f"the body must be a JSON object{hint}")
    return body


def validated(model: type[ModelT], raw: dict[str, Any]) -> ModelT:
    """`raw` (a JSON body, or a form read as one) validated by `model`; field errors answer
    400 invalid_request with details."""
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        raise validation_error(error) from error


def json_body(model: type[ModelT], *, optional: bool = False, hint: str = "") -> ModelT:
    """The body validated by `model` (`json_object`, then `validated`)."""
    return validated(model, json_object(optional=optional, hint=hint))
