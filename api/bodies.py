"""Reading JSON request bodies: one object, validated by a pydantic model, or a 400."""

from __future__ import annotations

from typing import Any, TypeVar

from flask import request
from pydantic import BaseModel, ValidationError

from api.errors import ApiError, validation_error

ModelT = TypeVar("ModelT", bound=BaseModel)


def json_object(*, optional: bool = False, hint: str = "") -> dict[str, Any]:
    """The body as a JSON object (`{}` for an empty body when `optional`), else 400 invalid_json."""
    body = request.get_json(silent=True)
    if body is None and optional and not request.get_data():
        body = {}
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", f"the body must be a JSON object{hint}")
    return body


def json_body(model: type[ModelT], *, optional: bool = False, hint: str = "") -> ModelT:
    """The body validated by `model`; field errors answer 400 invalid_request with details."""
    try:
        return model.model_validate(json_object(optional=optional, hint=hint))
    except ValidationError as error:
        raise validation_error(error) from error
