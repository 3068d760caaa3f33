"""The typed user profile: `storage/profile.py` and `GET`/`PATCH /api/profile`."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from storage.connection import DbConnection, Store
from storage.profile import (
    MAX_FIELDS,
    FieldNotFound,
    ProfileError,
    confirm_field,
    delete_fields,
    get_field,
    get_profile,
    set_field,
    set_fields,
)
from storage.users import create_user
from tests.conftest import new_token


@pytest.fixture
def db(store: Store) -> Iterator[DbConnection]:
    """On both backends (`store`: SQLite, PostgreSQL; tests/pg_support.py)."""
    with store.connection() as conn:
        yield conn


@pytest.fixture
def alice(db: sqlite3.Connection) -> int:
    return create_user(db, "alice")[0].id


@pytest.fixture
def bob(db: sqlite3.Connection) -> int:
    return create_user(db, "bob")[0].id


def stored_json(db: sqlite3.Connection, user_id: int) -> dict[str, Any]:
    return json.loads(db.execute("SELECT profile FROM users WHERE id = ?", (user_id,)).fetchone()[0])


# storage ------------------------------------------------------------------------------------


def test_new_user_has_an_empty_profile(db, alice):
    assert get_profile(db, alice) == {}
    assert get_field(db, alice, "location") is None


def test_set_field_stores_value_with_provenance(db, alice):
    field = set_field(db, alice, "location", "Paris", source="user_input", input_method="voice")
    assert field.value == "Paris" and field.source == "user_input" and field.input_method == "voice"
    assert field.confirmed is False and field.updated_at.endswith("Z")
    assert get_profile(db, alice) == {"location": field}
    assert stored_json(db, alice)["location"] == {
        "value": "Paris",
        "source": "user_input",
        "input_method": "voice",
        "updated_at": field.updated_at,
        "confirmed": False,
    }


@pytest.mark.parametrize("value", [42, 3.5, True, None, ["a", "b"], {"city": "Paris", "zip": "75001"}])
def test_any_json_value_round_trips(db, alice, value):
    set_field(db, alice, "anything", value, source="tool")
    assert get_field(db, alice, "anything").value == value


@pytest.mark.parametrize("name", ["", "Location", "1st", "_x", "a-b", "a b", "é", "x" * 65, "a\n"])
def test_invalid_field_names_are_refused(db, alice, name):
    with pytest.raises(ProfileError):
        set_field(db, alice, name, "v", source="api")
    assert get_profile(db, alice) == {}


@pytest.mark.parametrize("value", [{1, 2}, float("nan"), object(), "x" * 20_000])
def test_non_json_or_huge_values_are_refused(db, alice, value):
    with pytest.raises(ProfileError):
        set_field(db, alice, "bad", value, source="api")


def test_fields_are_per_user(db, alice, bob):
    set_field(db, alice, "location", "Paris", source="api")
    set_field(db, bob, "location", "Oslo", source="api")
    assert get_field(db, alice, "location").value == "Paris"
    assert get_field(db, bob, "location").value == "Oslo"


def test_set_fields_is_all_or_nothing(db, alice):
    set_field(db, alice, "keep", 1, source="api")
    with pytest.raises(ProfileError):
        set_fields(db, alice, {"ok": 1, "Bad Name": 2}, source="api")
    assert set(get_profile(db, alice)) == {"keep"}


def test_field_count_is_capped(db, alice):
    set_fields(db, alice, {f"f{n}": n for n in range(MAX_FIELDS)}, source="api")
    with pytest.raises(ProfileError):
        set_field(db, alice, "one_more", 1, source="api")
    assert len(get_profile(db, alice)) == MAX_FIELDS
    set_field(db, alice, "f0", "overwrite is fine", source="api")


def test_confirm_field_and_its_reset_on_a_new_value(db, alice):
    set_field(db, alice, "diet", "vegan", source="tool")
    confirmed = confirm_field(db, alice, "diet")
    assert confirmed.confirmed and confirmed.value == "vegan" and confirmed.source == "tool"
    assert set_field(db, alice, "diet", "vegan", source="user_input").confirmed  # same value: still confirmed
    assert not set_field(db, alice, "diet", "vegetarian", source="user_input").confirmed
    assert not confirm_field(db, alice, "diet", confirmed=False).confirmed


def test_confirm_missing_field_raises(db, alice):
    with pytest.raises(FieldNotFound):
        confirm_field(db, alice, "nothing")


def test_delete_fields(db, alice):
    set_fields(db, alice, {"a": 1, "b": 2}, source="api")
    assert delete_fields(db, alice, ["a", "zzz"]) == ["a"]
    assert set(get_profile(db, alice)) == {"b"}


def test_malformed_stored_entries_are_skipped_on_read_and_kept_on_write(db, alice):
    raw = {"legacy": "plain value", "Bad": {"value": 1}, "ok": {"value": 1, "source": "api", "updated_at": "t"}}
    db.execute("UPDATE users SET profile = ? WHERE id = ?", (json.dumps(raw), alice))
    assert set(get_profile(db, alice)) == {"ok"}
    set_field(db, alice, "location", "Rome", source="api")
    stored = stored_json(db, alice)
    assert stored["legacy"] == "plain value" and stored["Bad"] == {"value": 1}
    assert set(get_profile(db, alice)) == {"ok", "location"}


def test_non_object_profile_column_reads_as_empty(db, alice):
    db.execute("UPDATE users SET profile = '[1, 2]' WHERE id = ?", (alice,))
    assert get_profile(db, alice) == {}
    set_field(db, alice, "location", "Rome", source="api")
    assert get_field(db, alice, "location").value == "Rome"


def test_write_inside_a_callers_transaction_is_rolled_back_with_it(db, alice):
    db.execute("BEGIN")
    set_field(db, alice, "location", "Rome", source="api")
    db.execute("ROLLBACK")
    assert get_profile(db, alice) == {}


# HTTP ---------------------------------------------------------------------------------------


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.get_data(as_text=True)
    error = response.get_json()["error"]
    assert error["code"] == code and error["message"]
    return error


@pytest.mark.parametrize("method", ["get", "patch"])
def test_profile_needs_a_token(client, method):
    response = getattr(client, method)("/api/profile", json={"fields": {"location": "Paris"}})
    assert_error(response, 401, "unauthorized")


def test_get_profile_starts_empty(client, auth):
    response = client.get("/api/profile", headers=auth)
    assert response.status_code == 200
    assert response.get_json() == {"fields": {}}


def test_patch_sets_fields_with_api_source(client, auth):
    response = client.patch(
        "/api/profile", json={"fields": {"location": "Paris", "units": {"temp": "C"}}}, headers=auth
    )
    assert response.status_code == 200
    fields = response.get_json()["fields"]
    assert fields["location"]["value"] == "Paris" and fields["location"]["source"] == "api"
    assert fields["location"]["input_method"] is None and fields["location"]["confirmed"] is False
    assert fields["units"]["value"] == {"temp": "C"}
    assert client.get("/api/profile", headers=auth).get_json() == {"fields": fields}


def test_patch_leaves_other_fields_and_null_removes(client, auth):
    client.patch("/api/profile", json={"fields": {"location": "Paris", "diet": "vegan"}}, headers=auth)
    fields = client.patch("/api/profile", json={"fields": {"diet": None, "lang": "fr"}}, headers=auth).get_json()[
        "fields"
    ]
    assert set(fields) == {"location", "lang"}


def test_profiles_are_isolated_between_users(app, client, auth):
    client.patch("/api/profile", json={"fields": {"location": "Paris"}}, headers=auth)
    other = {"Authorization": f"Bearer {new_token(app, 'bob')}"}
    assert client.get("/api/profile", headers=other).get_json() == {"fields": {}}


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"fields": {}},
        {"fields": "Paris"},
        {"fields": {"Location": "Paris"}},
        {"fields": {"a-b": 1}},
        {"fields": {"a\n": 1}},
        {"fields": {"location": "Paris"}, "extra": 1},
        {"fields": {"big": "x" * 20_000}},
        {"fields": {f"f{n}": n for n in range(MAX_FIELDS + 1)}},
    ],
)
def test_invalid_patch_bodies_answer_400_and_change_nothing(client, auth, body):
    client.patch("/api/profile", json={"fields": {"location": "Paris"}}, headers=auth)
    assert_error(client.patch("/api/profile", json=body, headers=auth), 400, "invalid_request")
    assert set(client.get("/api/profile", headers=auth).get_json()["fields"]) == {"location"}


def test_patch_without_json_object_answers_400(client, auth):
    response = client.patch("/api/profile", data="not json", headers={**auth, "Content-Type": "application/json"})
    assert_error(response, 400, "invalid_json")
    assert_error(client.patch("/api/profile", json=["x"], headers=auth), 400, "invalid_json")
