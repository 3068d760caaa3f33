"""`GET /api/profile` and `PATCH /api/profile`: the user's own profile fields.

A PATCH writes the named fields with provenance `source: "api"` (all of them or none); a
`null` value removes the field. Fields not named are left alone.
"""

from __future__ import annotations

from typing import Annotated, Any

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, JsonValue, StringConstraints

from api.auth import current_user, require_user
from api.bodies import json_body
from api.database import get_db
from api.declare import Reply, operation
from api.errors import ApiError
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

    # pydantic writes the key pattern as `patternProperties`, which lets other keys through;
    # `propertyNames` says in the schema what validation does: every name must match
    fields: dict[FieldName, JsonValue] = Field(
        min_length=1, max_length=MAX_FIELDS, json_schema_extra={"propertyNames": {"pattern": FIELD_NAME_PATTERN}}
    )


class Profile(BaseModel):
    """The user's profile fields by name, each with its provenance."""

    fields: dict[str, ProfileField]


def public(fields: dict[str, ProfileField]) -> dict[str, Any]:
    return Profile(fields=dict(sorted(fields.items()))).model_dump(mode="json")


@bp.get("/profile")
@operation("The user's profile fields", replies={200: Reply("the profile", Profile)})
def show() -> ResponseReturnValue:
    return jsonify(public(get_profile(get_db(), current_user().id)))


@bp.patch("/profile")
@operation(
    "Set fields (all or none); `null` removes one",
    body=ProfilePatch,
    replies={200: Reply("the profile after the change", Profile)},
)
def update() -> ResponseReturnValue:
    patch = json_body(ProfilePatch, hint=': {"fields": {"name": value}}')
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
