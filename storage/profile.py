"""A user's profile: named fields, each a value with its provenance.

Stored as one JSON object in `users.profile`, `{name: ProfileField}`. Provenance is kept per
field (who wrote it: the user through a widget, the HTTP API, or a tool; how it was typed;
when; whether the user confirmed it) because tools act on these values for the user, and
an answer the user gave themselves must be told apart from one a tool guessed.

Writes are read-modify-write of the whole object inside one IMMEDIATE transaction, so two
concurrent writers of different fields never lose each other's update. Entries this module
cannot parse are skipped on read but kept as they are on write: nothing is lost silently.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from storage.connection import DbConnection
from storage.db import transaction, utc_now

log = logging.getLogger("storage.profile")

FIELD_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
FIELD_NAME = re.compile(FIELD_NAME_PATTERN)
MAX_FIELDS = 200
MAX_VALUE_CHARS = 10_000  # serialized JSON of one value

Source = Literal["user_input", "api", "tool"]
InputMethod = Literal["selection", "text", "voice"]


class ProfileField(BaseModel):
    """One profile value and where it came from."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    value: Any
    source: Source
    input_method: InputMethod | None = None
    updated_at: str
    confirmed: bool = False


class ProfileError(ValueError):
    """A profile write was refused; the message says why and is safe to show."""


class FieldNotFound(LookupError):
    """The user has no profile field of that name."""


def check_field_name(name: str) -> str:
    if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
        raise ProfileError(
            f"invalid field name {name!r}: use lowercase letters, digits and _, starting with a letter (max 64)"
        )
    return name


def check_value(name: str, value: Any) -> Any:
    """Values must survive a JSON round trip unchanged in meaning and stay small."""
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ProfileError(f"field {name!r}: the value must be plain JSON") from error
    if len(encoded) > MAX_VALUE_CHARS:
        raise ProfileError(f"field {name!r}: the value is longer than {MAX_VALUE_CHARS} characters of JSON")
    return value


def _parse(raw: Mapping[str, Any]) -> dict[str, ProfileField]:
    """Valid entries only: a malformed one (hand-edited, or an older shape) is skipped, not fatal."""
    fields: dict[str, ProfileField] = {}
    for name, entry in raw.items():
        if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
            log.warning("skipping profile field with invalid name %r", name)
            continue
        try:
            fields[name] = ProfileField.model_validate(entry)
        except ValidationError:
            log.warning("skipping malformed profile field %r", name)
    return fields


def read_raw_profile(conn: DbConnection, user_id: int) -> dict[str, Any]:
    """The stored JSON object, entries unparsed; anything else in the column counts as an empty profile."""
    row = conn.execute("SELECT profile FROM users WHERE id = ?", (user_id,)).fetchone()
    raw = json.loads(row["profile"]) if row else {}
    return raw if isinstance(raw, dict) else {}


def write_raw_profile(conn: DbConnection, user_id: int, raw: dict[str, Any]) -> None:
    """Replace the stored JSON object; callers hold the write transaction (read-modify-write)."""
    conn.execute("UPDATE users SET profile = ? WHERE id = ?", (json.dumps(raw), user_id))


@contextmanager
def _writing(conn: DbConnection) -> Iterator[None]:
    """A write transaction, unless the caller already holds one (then it is theirs to commit)."""
    if conn.in_transaction:
        yield
        return
    with transaction(conn):
        yield


def get_profile(conn: DbConnection, user_id: int) -> dict[str, ProfileField]:
    return _parse(read_raw_profile(conn, user_id))


def get_field(conn: DbConnection, user_id: int, name: str) -> ProfileField | None:
    return get_profile(conn, user_id).get(name)


def set_fields(
    conn: DbConnection,
    user_id: int,
    values: Mapping[str, Any],
    *,
    source: Source,
    input_method: InputMethod | None = None,
) -> dict[str, ProfileField]:
    """Write several fields at once (all or none); returns the fields written.

    A changed value loses its confirmation (the user confirmed the old one); writing the
    same value again keeps it.
    """
    for name, value in values.items():
        check_value(check_field_name(name), value)
    now = utc_now()
    written: dict[str, ProfileField] = {}
    with _writing(conn):
        raw = read_raw_profile(conn, user_id)
        fields = _parse(raw)
        for name, value in values.items():
            previous = fields.get(name)
            keep_confirmation = previous is not None and previous.confirmed and previous.value == value
            field = ProfileField(
                value=value, source=source, input_method=input_method, updated_at=now, confirmed=keep_confirmation
            )
            written[name] = field
            raw[name] = field.model_dump(mode="json")
        if len(raw) > MAX_FIELDS:
            raise ProfileError(f"a profile holds at most {MAX_FIELDS} fields")
        write_raw_profile(conn, user_id, raw)
    return written


def set_field(
    conn: DbConnection,
    user_id: int,
    name: str,
    value: Any,
    *,
    source: Source,
    input_method: InputMethod | None = None,
) -> ProfileField:
    return set_fields(conn, user_id, {name: value}, source=source, input_method=input_method)[name]


def confirm_field(conn: DbConnection, user_id: int, name: str, confirmed: bool = True) -> ProfileField:
    """Mark a field confirmed (or not) by the user; the value and its source are unchanged."""
    check_field_name(name)
    with _writing(conn):
        raw = read_raw_profile(conn, user_id)
        current = _parse(raw).get(name)
        if current is None:
            raise FieldNotFound(f"no profile field {name!r}")
        field = current.model_copy(update={"confirmed": confirmed, "updated_at": utc_now()})
        raw[name] = field.model_dump(mode="json")
        write_raw_profile(conn, user_id, raw)
    return field


def delete_fields(conn: DbConnection, user_id: int, names: list[str]) -> list[str]:
    """Remove fields; returns the names that existed."""
    for name in names:
        check_field_name(name)
    with _writing(conn):
        raw = read_raw_profile(conn, user_id)
        removed = [name for name in names if raw.pop(name, None) is not None]
        if removed:
            write_raw_profile(conn, user_id, raw)
    return removed
