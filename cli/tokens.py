"""Operator commands for API tokens (`python app.py tokens …`, `python app.py reset-admin-token`).

    tokens list [--user NAME]     every token: id, user, role, created (never the secret)
    tokens revoke ID              delete one token; the web sessions it opened end with it
    tokens rotate USER            revoke all of USER's tokens and print one new token
    reset-admin-token [--user N]  rotate the admin's tokens and write the new one to AUTH_TOKEN_FILE
    backup FILE                   a consistent copy of the SQLite database (PostgreSQL: pg_dump, said so)

Only SHA-256 hashes of tokens are stored, so a lost token cannot be shown again: it is
replaced. Every change takes effect at once on a running server (each request reads the
database), web logins included.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import click

from config.settings import Settings
from storage.backup import BackupRefused, backup
from storage.connection import DbConnection, Store
from storage.open import open_configured_store
from storage.users import User, first_admin, get_user_by_name, list_tokens, replace_tokens, revoke_token


def write_token_file(path: Path, token: str) -> None:
    """Write the token readable by this user only, also when the file already existed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        os.fchmod(fd, 0o600)
        file.write(token + "\n")


def register(cli: click.Group, load_settings: Callable[[], Settings]) -> None:
    """Add the token commands to `cli`; `load_settings` turns a bad setting into a clean error."""

    def database() -> Store:
        found = open_configured_store(load_settings())
        found.migrate()
        return found

    def user_named(conn: DbConnection, name: str) -> User:
        user = get_user_by_name(conn, name)
        if user is None:
            raise click.ClickException(f"no user named {name!r}")
        return user

    @cli.group("tokens")
    def tokens() -> None:
        """List, revoke and rotate API tokens."""

    @tokens.command("list")
    @click.option("--user", "user_name", default=None, help="only this user's tokens")
    def list_command(user_name: str | None) -> None:
        """Every token (id, user, role, created); never the secret itself."""
        with database().connection() as conn:
            found = list_tokens(conn, user_name)
        click.echo(f"{'id':>6}  {'user':<24} {'role':<10} created")
        for token in found:
            click.echo(f"{token.id:>6}  {token.user_name:<24} {token.role:<10} {token.created_at}")

    @tokens.command("revoke")
    @click.argument("token_id", type=int)
    def revoke_command(token_id: int) -> None:
        """Delete token ID (see `tokens list`); its web sessions end with it."""
        with database().connection() as conn:
            if not revoke_token(conn, token_id):
                raise click.ClickException(f"no token with id {token_id}")
        click.echo(f"revoked token {token_id}")

    @tokens.command("rotate")
    @click.argument("user_name")
    def rotate_command(user_name: str) -> None:
        """Revoke all of USER's tokens (and web sessions); the new token is the last line."""
        with database().connection() as conn:
            user = user_named(conn, user_name)
            token = replace_tokens(conn, user.id)
        click.echo(f"revoked every token of {user.name}; new token:")
        click.echo(token)

    @cli.command("backup")
    @click.argument("destination", type=click.Path(dir_okay=False, path_type=Path))
    def backup_command(destination: Path) -> None:
        """Copy the SQLite database to DESTINATION while the server runs (PostgreSQL: use pg_dump)."""
        try:
            size = backup(load_settings().database_target(), destination)
        except BackupRefused as error:
            raise click.ClickException(str(error)) from error
        click.echo(f"backed up the database to {destination} ({size} bytes)")

    @cli.command("reset-admin-token")
    @click.option("--user", "user_name", default=None, help="the admin to reset (default: the first admin)")
    def reset_admin_token_command(user_name: str | None) -> None:
        """Replace a lost admin token: the new one goes to AUTH_TOKEN_FILE (mode 0600)."""
        settings = load_settings()
        with database().connection() as conn:
            user = user_named(conn, user_name) if user_name else first_admin(conn)
            if user is None:
                raise click.ClickException(
                    "there is no admin yet: start the server once, or run `create-user NAME --role admin`"
                )
            if user.role != "admin":
                raise click.ClickException(f"{user.name} is not an admin (role {user.role})")
            token = replace_tokens(conn, user.id)
        write_token_file(Path(settings.auth_token_file), token)
        click.echo(f"new token for {user.name} written to {settings.auth_token_file}")
