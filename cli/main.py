"""The command line of `python app.py`: serve (no arguments) or run a management command.

    python app.py                      start the server (HOST, PORT)
    python app.py create-user NAME [--password]   create a user; the token is the last line printed
    python app.py set-password NAME    set a user's password (read from the terminal or stdin)
    python app.py import-tasks FILE    import a learner task project (YAML or JSON)
    python app.py tokens list|revoke ID|rotate USER, reset-admin-token   API tokens (cli/tokens.py)
    python app.py eval CASES…          the protocol evaluation's report card (cli/eval.py)

The app factory is passed in by `app.py`, so this wing sits above the app without importing it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import NoReturn

import click
from flask import Flask

from cli import eval as eval_command
from cli import tokens
from config.settings import ConfigError, Settings, load_settings
from learner.importer import TaskFileError, import_task_file
from live.redis_conn import RedisUnavailable
from observe.logs import configure_logging
from providers import ProviderError
from serving.startup import log_startup_report
from storage.db import transaction
from storage.file_modes import owner_only_from_now, restrict, server_paths
from storage.open import open_configured_store
from storage.passwords import Passwords, password_problem
from storage.users import ROLES, DuplicateUserError, create_account, get_user_by_name, name_problem, set_password_hash
from storage.web_sessions import close_password_sessions

AppFactory = Callable[[Settings], Flask]


def cli_settings() -> Settings:
    """Settings for a CLI entry point: a bad value is a one-line error, not a traceback."""
    try:
        return load_settings()
    except ConfigError as error:
        raise click.ClickException(str(error)) from error


def valid_user_name(_: click.Context, __: click.Parameter, value: str) -> str:
    name = value.strip()
    problem = name_problem(name)
    if problem is not None:
        raise click.BadParameter(problem)
    return name


def build_cli(create_app: AppFactory) -> click.Group:
    """The `python app.py` group, serving apps built by `create_app`."""

    @click.group(invoke_without_command=True)
    @click.pass_context
    def cli(ctx: click.Context) -> None:
        """Run the server (no arguments) or a management command."""
        owner_only_from_now()  # files this process creates (database, uploads, tokens) are 0600, dirs 0700
        if ctx.invoked_subcommand is None:
            serve(create_app)

    cli.add_command(create_user_command)
    cli.add_command(set_password_command)
    cli.add_command(import_tasks_command)
    tokens.register(cli, cli_settings)
    eval_command.register(cli, cli_settings)
    return cli


def read_password() -> str:
    """A new password from the terminal (asked twice, not echoed) or the first line of stdin
    (scripts): never from the command line, where `ps` and the shell history would keep it."""
    if sys.stdin.isatty():
        password = str(click.prompt("Password", hide_input=True, confirmation_prompt=True))
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    problem = password_problem(password)
    if problem is not None:
        raise click.ClickException(problem)
    return password


@click.command("create-user")
@click.argument("name", callback=valid_user_name)
@click.option("--role", default="user", type=click.Choice(ROLES))
@click.option("--password", "with_password", is_flag=True, help="also set a password, read from the terminal or stdin")
def create_user_command(name: str, role: str, with_password: bool) -> None:
    """Create a user and print its API token on the last line."""
    settings = cli_settings()
    hashed = Passwords().hash(read_password(), key="cli") if with_password else None
    database = open_configured_store(settings)
    database.migrate()
    with database.connection() as conn:
        try:
            user, token = create_account(conn, name, role, hashed, with_token=True)
        except DuplicateUserError as error:
            raise click.ClickException(f"{error}; choose another name") from error
    assert token is not None
    click.echo(f"created user {user.name} (id {user.id}, role {user.role}{', with a password' if hashed else ''})")
    click.echo(token)


@click.command("set-password")
@click.argument("name")
def set_password_command(name: str) -> None:
    """Set NAME's password (read from the terminal or stdin); their password sign-ins end."""
    settings = cli_settings()
    database = open_configured_store(settings)
    database.migrate()
    with database.connection() as conn:
        user = get_user_by_name(conn, name)
        if user is None:
            raise click.ClickException(f"no user named {name!r}")
        hashed = Passwords().hash(read_password(), key="cli")
        with transaction(conn):
            set_password_hash(conn, user.id, hashed)
            close_password_sessions(conn, user.id)
    click.echo(f"password set for {user.name}")


@click.command("import-tasks")
@click.argument("file")
def import_tasks_command(file: str) -> None:
    """Validate a YAML or JSON task project and import it: all of it, or nothing (exit code 1)."""
    settings = cli_settings()
    database = open_configured_store(settings)
    database.migrate()
    with database.connection() as conn:
        try:
            report = import_task_file(conn, file)
        except TaskFileError as error:
            for problem in error.problems:
                click.echo(problem, err=True)
            raise click.ClickException(f"{len(error.problems)} problem(s) in {file}; nothing was imported") from error
    click.echo(report.summary())


def serve(create_app: AppFactory) -> None:
    """Start the server and log what a newcomer needs (`serving/startup.py`); a configuration mistake
    (a bad setting, a missing SCRIPTED_REPLIES file) is one line on stderr and exit code 2."""
    try:
        settings = load_settings()
    except ConfigError as error:
        start_failed(error)
    restrict(server_paths(settings.data_dir, settings.database_target().sqlite_file, settings.auth_token_file))
    configure_logging(settings.log_format)  # LOG_FORMAT=json: JSON lines with trace ids (observe/logs.py)
    from serving.server import serve as serve_with_uvicorn  # uvicorn is imported only by a serving process

    try:
        app = create_app(settings)
    except (ConfigError, ProviderError, RedisUnavailable) as error:
        start_failed(error)
    log_startup_report(app, settings)
    serve_with_uvicorn(app, settings)


def start_failed(error: Exception) -> NoReturn:
    click.echo(f"Error: {error}", err=True)
    raise click.exceptions.Exit(2)
