"""Users and their API tokens. Only a SHA-256 of each token is stored.

Tokens are 256-bit random strings, so an unsalted hash is enough: there is nothing to
brute-force, and a lookup by hash keeps authentication one indexed query.
"""

from __future__ import annotations

import hashlib
import secrets

from pydantic import BaseModel

from storage.connection import DbConnection, DbRow, inserted_id
from storage.db import transaction, utc_now
from storage.errors import IntegrityViolation

TOKEN_PREFIX = "oct_"


class User(BaseModel):
    id: int
    name: str
    role: str
    created_at: str


class TokenInfo(BaseModel):
    """An API token as the operator sees it (`python app.py tokens list`): never the secret."""

    id: int
    user_id: int
    user_name: str
    role: str
    created_at: str


class DuplicateUserError(Exception):
    """A user with this name already exists."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def user_from_row(row: DbRow) -> User:
    return User(id=row["id"], name=row["name"], role=row["role"], created_at=row["created_at"])


def create_user(conn: DbConnection, name: str, role: str = "user") -> tuple[User, str]:
    """Create a user with one fresh token; returns the user and the token (shown once)."""
    with transaction(conn):
        return _insert_user(conn, name, role)


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
    token = new_token()
    now = utc_now()
    try:
        cursor = conn.execute(
            "INSERT INTO users(name, role, created_at) VALUES (?, ?, ?) RETURNING id", (name, role, now)
        )
    except IntegrityViolation as error:
        raise DuplicateUserError(f"user {name!r} already exists") from error
    user_id = inserted_id(cursor)
    conn.execute(
        "INSERT INTO api_tokens(user_id, token_hash, created_at) VALUES (?, ?, ?)",
        (user_id, hash_token(token), now),
    )
    return User(id=user_id, name=name, role=role, created_at=now), token


def add_token(conn: DbConnection, user_id: int) -> str:
    token = new_token()
    conn.execute(
        "INSERT INTO api_tokens(user_id, token_hash, created_at) VALUES (?, ?, ?)",
        (user_id, hash_token(token), utc_now()),
    )
    return token


def user_for_token(conn: DbConnection, token: str) -> User | None:
    row = conn.execute(
        "SELECT u.* FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ?",
        (hash_token(token),),
    ).fetchone()
    return user_from_row(row) if row else None


def find_token(conn: DbConnection, token: str) -> tuple[User, int] | None:
    """The token's user and the token's id (a web login remembers which token opened it)."""
    row = conn.execute(
        "SELECT u.*, t.id AS token_id FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ?",
        (hash_token(token),),
    ).fetchone()
    return (user_from_row(row), int(row["token_id"])) if row else None


def list_tokens(conn: DbConnection, user_name: str | None = None) -> list[TokenInfo]:
    rows = conn.execute(
        "SELECT t.id, t.user_id, u.name AS user_name, u.role, t.created_at FROM api_tokens t "
        "JOIN users u ON u.id = t.user_id WHERE ? IS NULL OR u.name = ? ORDER BY t.id",
        (user_name, user_name),
    )
    return [TokenInfo(**dict(row)) for row in rows]


def revoke_token(conn: DbConnection, token_id: int) -> bool:
    """Delete one token; the web sessions it opened end with it (ON DELETE CASCADE)."""
    return conn.execute("DELETE FROM api_tokens WHERE id = ?", (token_id,)).rowcount > 0


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
