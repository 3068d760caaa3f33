"""Users and their API tokens. Only a SHA-256 of each token is stored.

Tokens are 256-bit random strings, so an unsalted hash is enough: there is nothing to
brute-force, and a lookup by hash keeps authentication one indexed query. Passwords are the
opposite (guessable), so they are kept as argon2 hashes made by `storage/passwords.py`; this
module only stores the hash it is given.

A disabled user (`disabled_at` set) is nobody: every lookup that authenticates (a token, a web
session) leaves them out in its SQL, so no caller can forget the check; disabling also ends
their web sessions. Their rows (chats, tokens) stay, so enabling them again restores them.
"""

from __future__ import annotations

import hashlib
import secrets

from pydantic import BaseModel

from storage.connection import DbConnection, DbRow, inserted_id
from storage.db import transaction, utc_now
from storage.errors import IntegrityViolation

TOKEN_PREFIX = "oct_"
MAX_NAME_CHARS = 64
ROLES = ("user", "instructor", "admin")


class User(BaseModel):
    id: int
    name: str
    role: str
    created_at: str
    disabled_at: str | None = None


class UserSummary(User):
    """A user as the admin page lists them: whether they have a password, how many tokens."""

    has_password: bool
    tokens: int


class TokenInfo(BaseModel):
    """An API token as the operator sees it (`python app.py tokens list`): never the secret."""

    id: int
    user_id: int
    user_name: str
    role: str
    created_at: str
    label: str | None = None


class DuplicateUserError(Exception):
    """A user with this name already exists."""


class LastAdminError(Exception):
    """The change would leave no active admin (nobody could manage users any more)."""


def name_problem(name: str) -> str | None:
    """What is wrong with a new user's name (the CLI's and the API's one rule), or None."""
    if not 1 <= len(name) <= MAX_NAME_CHARS or any(char.isspace() or not char.isprintable() for char in name):
        return f"use 1-{MAX_NAME_CHARS} printable characters without spaces"
    return None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def user_from_row(row: DbRow) -> User:
    return User(
        id=row["id"], name=row["name"], role=row["role"], created_at=row["created_at"], disabled_at=row["disabled_at"]
    )


def create_user(conn: DbConnection, name: str, role: str = "user") -> tuple[User, str]:
    """Create a user with one fresh token; returns the user and the token (shown once)."""
    with transaction(conn):
        return _insert_user(conn, name, role)


def create_account(
    conn: DbConnection, name: str, role: str, password_hash: str | None, with_token: bool, label: str | None = None
) -> tuple[User, str | None]:
    """A user with a password hash and/or a first token (shown once), in one transaction."""
    with transaction(conn):
        user, token = _insert_row(conn, name, role, with_token=with_token, label=label)
        if password_hash is not None:
            conn.execute("UPDATE users SET password_hash = ? WHERE id = ?", (password_hash, user.id))
        return user, token


def create_first_admin(conn: DbConnection, max_names: int = 100) -> tuple[User, str] | None:
    """The first admin (`admin`, or `admin2`, … when the name is taken), unless a user with the
    admin role exists. Checked and created under one write lock, so that several servers
    starting at once on a new database make one admin between them, not one each."""
    with transaction(conn):
        if count_users(conn, role="admin") > 0:
            return None
        taken = {row[0] for row in conn.execute("SELECT name FROM users WHERE name LIKE 'admin%'")}
        names = ["admin", *(f"admin{suffix}" for suffix in range(2, max_names + 1))]
        free = next((name for name in names if name not in taken), None)
        if free is None:
            raise RuntimeError(f"no free admin name after {max_names} tries")
        return _insert_user(conn, free, "admin")


def _insert_user(conn: DbConnection, name: str, role: str) -> tuple[User, str]:
    """The user's row and first token, inside the caller's transaction."""
    user, token = _insert_row(conn, name, role, with_token=True)
    assert token is not None
    return user, token


def _insert_row(
    conn: DbConnection, name: str, role: str, *, with_token: bool, label: str | None = None
) -> tuple[User, str | None]:
    now = utc_now()
    try:
        cursor = conn.execute(
            "INSERT INTO users(name, role, created_at) VALUES (?, ?, ?) RETURNING id", (name, role, now)
        )
    except IntegrityViolation as error:
        raise DuplicateUserError(f"user {name!r} already exists") from error
    user_id = inserted_id(cursor)
    user = User(id=user_id, name=name, role=role, created_at=now)
    return user, (add_token(conn, user_id, label) if with_token else None)


def add_token(conn: DbConnection, user_id: int, label: str | None = None) -> str:
    token = new_token()
    conn.execute(
        "INSERT INTO api_tokens(user_id, token_hash, created_at, label) VALUES (?, ?, ?, ?)",
        (user_id, hash_token(token), utc_now(), label),
    )
    return token


def add_labelled_token(conn: DbConnection, user_id: int, label: str | None) -> tuple[TokenInfo, str]:
    """A new token of the user and how it is listed; the secret is returned once, here."""
    with transaction(conn):
        token = add_token(conn, user_id, label)
        row = conn.execute(_TOKEN_COLUMNS + " WHERE t.token_hash = ?", (hash_token(token),)).fetchone()
    return TokenInfo(**dict(row)), token


def user_for_token(conn: DbConnection, token: str) -> User | None:
    """The token's user, unless there is no such token or the user is disabled."""
    found = find_token(conn, token)
    return found[0] if found else None


def find_token(conn: DbConnection, token: str) -> tuple[User, int] | None:
    """The token's (active) user and the token's id (a web login remembers which token opened it)."""
    row = conn.execute(
        "SELECT u.*, t.id AS token_id FROM api_tokens t JOIN users u ON u.id = t.user_id "
        "WHERE t.token_hash = ? AND u.disabled_at IS NULL",
        (hash_token(token),),
    ).fetchone()
    return (user_from_row(row), int(row["token_id"])) if row else None


def token_of_disabled_user(conn: DbConnection, token: str) -> bool:
    """Whether a token that did not authenticate belongs to a disabled user (a clearer refusal)."""
    row = conn.execute(
        "SELECT 1 FROM api_tokens t JOIN users u ON u.id = t.user_id "
        "WHERE t.token_hash = ? AND u.disabled_at IS NOT NULL",
        (hash_token(token),),
    ).fetchone()
    return row is not None


_TOKEN_COLUMNS = (
    "SELECT t.id, t.user_id, u.name AS user_name, u.role, t.created_at, t.label FROM api_tokens t "
    "JOIN users u ON u.id = t.user_id"
)


def list_tokens(conn: DbConnection, user_name: str | None = None) -> list[TokenInfo]:
    rows = conn.execute(_TOKEN_COLUMNS + " WHERE ? IS NULL OR u.name = ? ORDER BY t.id", (user_name, user_name))
    return [TokenInfo(**dict(row)) for row in rows]


def tokens_of(conn: DbConnection, user_id: int) -> list[TokenInfo]:
    rows = conn.execute(_TOKEN_COLUMNS + " WHERE t.user_id = ? ORDER BY t.id", (user_id,))
    return [TokenInfo(**dict(row)) for row in rows]


def revoke_token(conn: DbConnection, token_id: int) -> bool:
    """Delete one token; the web sessions it opened end with it (ON DELETE CASCADE)."""
    return conn.execute("DELETE FROM api_tokens WHERE id = ?", (token_id,)).rowcount > 0


def revoke_token_of(conn: DbConnection, user_id: int, token_id: int) -> bool:
    """Delete the user's token `token_id`; another user's token is left alone (and answers False)."""
    return conn.execute("DELETE FROM api_tokens WHERE id = ? AND user_id = ?", (token_id, user_id)).rowcount > 0


# passwords and account state -------------------------------------------------------------------


def login_record(conn: DbConnection, name: str) -> tuple[User, str | None] | None:
    """The user named `name` (disabled ones too: the caller says so only to the right password)
    and their password hash, if any."""
    row = conn.execute("SELECT * FROM users WHERE name = ?", (name,)).fetchone()
    return (user_from_row(row), row["password_hash"]) if row else None


def password_hash_of(conn: DbConnection, user_id: int) -> str | None:
    row = conn.execute("SELECT password_hash FROM users WHERE id = ?", (user_id,)).fetchone()
    return row["password_hash"] if row else None


def set_password_hash(conn: DbConnection, user_id: int, password_hash: str) -> None:
    conn.execute("UPDATE users SET password_hash = ? WHERE id = ?", (password_hash, user_id))


_SUMMARY = "SELECT u.*, (SELECT COUNT(*) FROM api_tokens t WHERE t.user_id = u.id) AS token_count FROM users u"


def _summary(row: DbRow) -> UserSummary:
    user = user_from_row(row).model_dump()
    return UserSummary(**user, has_password=row["password_hash"] is not None, tokens=int(row["token_count"]))


def list_users(conn: DbConnection) -> list[UserSummary]:
    return [_summary(row) for row in conn.execute(_SUMMARY + " ORDER BY u.id")]


def user_summary(conn: DbConnection, user_id: int) -> UserSummary | None:
    row = conn.execute(_SUMMARY + " WHERE u.id = ?", (user_id,)).fetchone()
    return _summary(row) if row else None


def update_account(
    conn: DbConnection, user_id: int, *, role: str | None = None, disabled: bool | None = None
) -> User | None:
    """Change a user's role and/or disable (or enable) them, in one transaction that keeps at
    least one active admin (`LastAdminError`). Disabling ends the user's web sessions."""
    with transaction(conn):
        user = get_user(conn, user_id)
        if user is None:
            return None
        new_role = role if role is not None else user.role
        now_disabled = disabled if disabled is not None else user.disabled_at is not None
        if user.role == "admin" and user.disabled_at is None and (new_role != "admin" or now_disabled):
            others = conn.execute(
                "SELECT COUNT(*) FROM users WHERE role = 'admin' AND disabled_at IS NULL AND id <> ?", (user_id,)
            ).fetchone()[0]
            if int(others) == 0:
                raise LastAdminError("this is the last active admin: make another admin first")
        if role is not None:
            conn.execute("UPDATE users SET role = ? WHERE id = ?", (role, user_id))
        if disabled is True and user.disabled_at is None:
            conn.execute("UPDATE users SET disabled_at = ? WHERE id = ?", (utc_now(), user_id))
            conn.execute("DELETE FROM web_sessions WHERE user_id = ?", (user_id,))
        elif disabled is False:
            conn.execute("UPDATE users SET disabled_at = NULL WHERE id = ?", (user_id,))
        return get_user(conn, user_id)


def replace_tokens(conn: DbConnection, user_id: int) -> str:
    """Revoke every token of the user (and so their web sessions) and issue one new token,
    in one transaction: there is no moment without a token, nor one with both."""
    with transaction(conn):
        conn.execute("DELETE FROM api_tokens WHERE user_id = ?", (user_id,))
        return add_token(conn, user_id)


def get_user_by_name(conn: DbConnection, name: str) -> User | None:
    row = conn.execute("SELECT * FROM users WHERE name = ?", (name,)).fetchone()
    return user_from_row(row) if row else None


def first_admin(conn: DbConnection) -> User | None:
    row = conn.execute("SELECT * FROM users WHERE role = 'admin' ORDER BY id LIMIT 1").fetchone()
    return user_from_row(row) if row else None


def get_user(conn: DbConnection, user_id: int) -> User | None:
    row = conn.execute("SELECT * FROM users WHERE id = ?", (user_id,)).fetchone()
    return user_from_row(row) if row else None


def count_users(conn: DbConnection, role: str | None = None) -> int:
    if role is None:
        return int(conn.execute("SELECT COUNT(*) FROM users").fetchone()[0])
    return int(conn.execute("SELECT COUNT(*) FROM users WHERE role = ?", (role,)).fetchone()[0])
