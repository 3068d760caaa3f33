"""`DATABASE_URL`: which database the app uses, read once into a typed value.

Two kinds (SPEC 2): `sqlite:///PATH` (the embedded default: a file on this host; unset means
`sqlite:///` + `DATABASE_PATH`) and `postgresql://…` (also `postgres://`), a server that every
process on every host shares. Anything else is refused when the settings load, as one line
naming the setting, before anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

POSTGRES_SCHEMES = ("postgresql", "postgres")


@dataclass(frozen=True)
class DatabaseTarget:
    """`kind` and, for SQLite, the file path; for PostgreSQL the URL as libpq takes it."""

    kind: Literal["sqlite", "postgresql"]
    location: str

    @property
    def sqlite_file(self) -> str | None:
        """The SQLite file's path; None for a PostgreSQL server."""
        return self.location if self.kind == "sqlite" else None

    def redacted(self) -> str:
        """For logs: the PostgreSQL URL without its password."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.location}"
        parts = urlsplit(self.location)
        if parts.password is None:
            return self.location
        netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
        return parts._replace(netloc=netloc).geturl()


def parse_database_url(url: str) -> DatabaseTarget:
    """`sqlite:///data/app.db` (relative) or `sqlite:////abs/app.db`; `postgresql://…`.
    Raises ValueError with the fix for anything else."""
    text = url.strip()
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme == "sqlite":
        if not text.lower().startswith("sqlite:///") or len(text) <= len("sqlite:///"):
            raise ValueError("a SQLite URL is sqlite:///PATH (three slashes, then the file's path)")
        return DatabaseTarget("sqlite", text[len("sqlite:///") :])
    if scheme in POSTGRES_SCHEMES:
        parts = urlsplit(text)
        if not parts.hostname and "host=" not in parts.query:
            raise ValueError("a PostgreSQL URL needs a host: postgresql://user:password@host:5432/dbname")
        return DatabaseTarget("postgresql", text)
    raise ValueError("use sqlite:///PATH or postgresql://user:password@host:port/dbname")


def checked_database_url(value: object) -> object:
    """pydantic `BeforeValidator` of `Settings.database_url`: refuse an unknown kind early."""
    if isinstance(value, str) and value.strip():
        parse_database_url(value)
        return value.strip()
    return None if value == "" else value
