"""`GET /api/profile` and `PATCH /api/profile`: the user's own profile fields.

A PATCH writes the named fields with provenance `source: "api"` (all of them or none); a
`null` value removes the field. Fields not named are left alone.
"""

from __future__ import annotations

from typing import Annotated, Any

from flask import Blueprint, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints, ValidationError

from api.auth import current_user, require_user
from api.database import get_db
from api.errors import ApiError, validation_error
from storage.db import transaction
from storage.profile import (
    FIELD_NAME_PATTERN,
    MAX_FIELDS,
    ProfileError,
    ProfileField,
    delete_fields,
    get_profile,
    set_fields,
)

bp = Blueprint("profile", __name__, url_prefix="/api")
bp.before_request(require_user)

FieldName = Annotated[str, StringConstraints(pattern=FIELD_NAME_PATTERN)]


class ProfilePatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fields: dict[FieldName, JsonValue] = Field(min_length=1, max_length=MAX_FIELDS)


def public(fields: dict[str, ProfileField]) -> dict[str, Any]:
    return {"fields": {name: field.model_dump(mode="json") for name, field in sorted(fields.items())}}


@bp.get("/profile")
def show():  # type: ignore[no-untyped-def]
    return jsonify(public(get_profile(get_db(), current_user().id)))


@bp.patch("/profile")
def update():  # type: ignore[no-untyped-def]
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", 'the body must be a JSON object: {"fields": {"name": value}}')
    try:
        patch = ProfilePatch.model_validate(body)
    except ValidationError as error:
        raise validation_error(error) from error
    conn, user_id = get_db(), current_user().id
    values = {name: value for name, value in patch.fields.items() if value is not None}
    removed = [name for name, value in patch.fields.items() if value is None]
    try:
        with transaction(conn):  # one PATCH is all or nothing
            if values:
                set_fields(conn, user_id, values, source="api")
            if removed:
                delete_fields(conn, user_id, removed)
    except ProfileError as error:
        raise ApiError(400, "invalid_request", str(error)) from error
    return jsonify(public(get_profile(conn, user_id)))
