"""Flask app factory, CLI, and server entry point.

    python app.py                      start the server (HOST, PORT)
    python app.py create-user NAME     create a user; the token is the last line printed

`create_app(settings)` builds every long-lived service once (database, providers,
registry, system prompt) and hangs it on `app.extensions`; request handlers receive
them from there, so tests build an app per test with their own settings.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from pathlib import Path

import click
from flask import Flask

from api import chat, files, health, sessions
from api.database import init_app as init_database
from api.errors import register_error_handlers
from config import Settings, load_settings
from pipeline.prompt import build_system_prompt, load_persona
from pipeline.turn import TurnServices
from providers import FallbackChain, build_chain
from storage.db import Database
from storage.messages import Message
from storage.uploads import StoredImage, load_data_url
from storage.users import count_users, create_user
from tools.catalog import build_registry

MAX_REQUEST_BYTES = 48 * 1024 * 1024


def build_chains(settings: Settings) -> tuple[FallbackChain, FallbackChain]:
    """The text chain and the vision chain (the same object unless VISION_* differ)."""
    chat_chain = build_chain(settings.llm_config(), settings.llm_fallbacks, api_keys=settings.fallback_api_keys)
    vision_config = settings.vision_config()
    if vision_config == settings.llm_config():
        return chat_chain, chat_chain
    return chat_chain, build_chain(vision_config)


def image_loader(data_dir: str):  # type: ignore[no-untyped-def]
    """Reads a user message's stored images back as data URLs for a vision provider."""

    def load(message: Message) -> tuple[str, ...]:
        images = (message.meta or {}).get("images") or []
        urls = (load_data_url(data_dir, StoredImage.model_validate(image)) for image in images)
        return tuple(url for url in urls if url)

    return load


def ensure_admin(database: Database, token_file: str) -> str | None:
    """On first run (no users at all) create `admin` and write its token to `token_file`."""
    with database.connection() as conn:
        if count_users(conn) > 0:
            return None
        _, token = create_user(conn, "admin", role="admin")
    path = Path(token_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n", encoding="utf-8")
    path.chmod(0o600)
    return token


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or load_settings()
    app = Flask(__name__, static_folder="static", static_url_path="/static")
    app.config.update(
        MAX_CONTENT_LENGTH=MAX_REQUEST_BYTES,
        SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_hex(32),
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]
    database = Database(settings.database_path)
    database.migrate()
    ensure_admin(database, settings.auth_token_file)
    registry = build_registry()
    chat_chain, vision_chain = build_chains(settings)
    app.extensions["settings"] = settings
    app.extensions["database"] = database
    app.extensions["turn_services"] = TurnServices(
        settings=settings,
        database=database,
        registry=registry,
        chat=chat_chain,
        vision=vision_chain,
        system_prompt=build_system_prompt(registry, load_persona(settings.system_prompt_file)),
        load_images=image_loader(settings.data_dir),
    )
    init_database(app)
    register_error_handlers(app)
    for blueprint in (chat.bp, sessions.bp, files.bp, health.bp):
        app.register_blueprint(blueprint)
    return app


@click.group(invoke_without_command=True)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Run the server (no arguments) or a management command."""
    if ctx.invoked_subcommand is None:
        serve()


@cli.command("create-user")
@click.argument("name")
@click.option("--role", default="user", type=click.Choice(["user", "instructor", "admin"]))
def create_user_command(name: str, role: str) -> None:
    """Create a user and print its API token on the last line."""
    settings = load_settings()
    database = Database(settings.database_path)
    database.migrate()
    with database.connection() as conn:
        user, token = create_user(conn, name, role=role)
    click.echo(f"created user {user.name} (id {user.id}, role {user.role})")
    click.echo(token)


def serve() -> None:
    settings = load_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from server import serve as serve_with_gunicorn

    serve_with_gunicorn(create_app(settings), settings)


if __name__ == "__main__":
    sys.exit(cli())
