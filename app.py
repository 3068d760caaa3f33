"""Flask app factory and the entry point of `python app.py` (the command line is `cli/main.py`).

`create_app(settings)` builds every long-lived service once (database, providers,
registry, system prompt) into one typed `Services` value (`api/services.py`); request
handlers read it through `services()`, so tests build an app per test with their own settings.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType

from flask import Flask
from flask.json.provider import DefaultJSONProvider

from api import (
    accounts,
    admin,
    auth,
    bodies,
    chat,
    export,
    files,
    health,
    instructor,
    memories,
    observe,
    profile,
    rate_limits,
    search,
    sessions,
    status,
    streams,
    tool_results,
    tools,
    ui,
    versions,
)
from api import headers as security_headers
from api import judge as judge_api
from api import settings as settings_api
from api import turns as turn_answers
from api.database import init_app as init_database
from api.errors import register_error_handlers
from api.openapi import document as openapi
from api.services import Services
from api.services import install as install_services
from api.v1 import routes as openai_api
from bounded.pool import WorkerPool
from config.settings import Settings, load_settings
from judge.engine import EngineAddress
from judge.preparing import build_running
from judge.reaper import reap
from judge.service import Judge
from live.backends import build_live
from live.desk import TurnDesk, TurnLimits
from live.limits import RateLimiter
from mcp_client.hub import build_hub
from observe.telemetry import Telemetry
from observe.tracing import TracingConfig, build_telemetry
from pipeline.prompt import PromptBook, load_persona
from pipeline.results import TurnServices
from providers import FallbackChain, ProviderProbe, breaker_policy, build_chain, llm_config, vision_config
from storage.connection import Store
from storage.messages import Message
from storage.open import open_configured_store
from storage.passwords import Passwords
from storage.uploads import StoredImage, load_data_url
from storage.users import create_first_admin
from tools.catalog import build_registry

MAX_REQUEST_BYTES = 48 * 1024 * 1024
MAX_ADMIN_NAME_TRIES = 100


def build_chains(settings: Settings, telemetry: Telemetry | None = None) -> tuple[FallbackChain, FallbackChain]:
    """The text chain and the vision chain (the same object unless VISION_* differ)."""
    chat = llm_config(settings)
    chat_chain = build_chain(
        chat,
        settings.llm_fallbacks,
        api_keys=settings.fallback_api_keys,
        breaker=breaker_policy(settings),
        telemetry=telemetry,
    )
    vision = vision_config(settings)
    if vision == chat:
        return chat_chain, chat_chain
    return chat_chain, build_chain(vision, breaker=breaker_policy(settings), telemetry=telemetry)


def tracing_config(settings: Settings) -> TracingConfig:
    """What observe/tracing.py needs of the settings (the standard `OTEL_*` variables)."""
    return TracingConfig(
        endpoint=settings.otel_exporter_otlp_endpoint,
        traces_endpoint=settings.otel_exporter_otlp_traces_endpoint,
        headers=settings.otel_exporter_otlp_headers,
        timeout_s=settings.otel_exporter_otlp_timeout / 1000,
        service_name=settings.otel_service_name,
        capture_content=settings.otel_instrumentation_genai_capture_message_content,
    )


def image_loader(data_dir: str) -> Callable[[Message], tuple[str, ...]]:
    """Reads a user message's stored images back as data URLs for a vision provider."""

    def load(message: Message) -> tuple[str, ...]:
        images = (message.meta or {}).get("images") or []
        urls = (load_data_url(data_dir, StoredImage.model_validate(image)) for image in images)
        return tuple(url for url in urls if url)

    return load


def build_judge(settings: Settings, telemetry: Telemetry | None = None) -> tuple[Judge | None, dict[str, object]]:
    """The Docker judge when it can run here, else None and the reason (the app still starts).

    At start-up the reaper removes containers a crashed earlier run left behind.
    """
    if settings.judge_enabled is False:
        return None, {"available": False, "reason": "disabled by JUDGE_ENABLED=0"}
    address = EngineAddress(settings.docker_host, settings.docker_tls_verify, settings.docker_cert_path)
    judge = Judge.from_env(
        address=address, pool_size=settings.judge_pool_size, runs=settings.judge_runs, telemetry=telemetry
    )
    if judge.client is None and not address.remote and not build_running(settings.data_dir):
        return None, {"available": False, "reason": judge.available()[1]}
    if judge.client is None:  # a judge host down at start, or dockerd started by a build: it connects once it answers
        return judge, {"available": False, "reason": judge.available()[1]}
    removed = reap(judge.client)
    if removed:
        logging.getLogger("judge").warning("removed %d orphaned judge containers", removed)
    available, reason = judge.available()
    return judge, {"available": available, "reason": reason}


def persistent_secret(path: Path) -> str:
    """The cookie-signing key, made once and kept in DATA_DIR so logins survive restarts.

    Published with a hard link, which fails when the file exists: of several processes
    starting at once on a new DATA_DIR, one key wins and every process reads that one
    (a key each would make one process's cookies void on the others)."""
    if path.is_file():
        return path.read_text(encoding="utf-8").strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    draft.write_text(secrets.token_hex(32), encoding="utf-8")
    draft.chmod(0o600)
    try:
        os.link(draft, path)
    except FileExistsError:
        pass  # another process published its key first: use that one
    finally:
        draft.unlink()
    return path.read_text(encoding="utf-8").strip()


def ensure_admin(database: Store, token_file: str) -> str | None:
    """On first run (no admin yet) create `admin` and write its token to `token_file`.

    Users made with `create-user` before the first start do not count: the admin is made
    as long as no user has the admin role. A taken name `admin` gets a numbered suffix.
    """
    with database.connection() as conn:
        created = create_first_admin(conn, MAX_ADMIN_NAME_TRIES)
    if created is None:
        return None
    _, token = created
    path = Path(token_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n", encoding="utf-8")
    path.chmod(0o600)
    return token


def create_app(settings: Settings | None = None, telemetry: Telemetry | None = None) -> Flask:
    """The app; `telemetry` is built from the settings unless a test hands its own (an in-memory exporter)."""
    settings = settings or load_settings()
    app = Flask(__name__, static_folder="static", static_url_path="/static")
    app.config.update(
        MAX_CONTENT_LENGTH=MAX_REQUEST_BYTES,
        SECRET_KEY=os.environ.get("SECRET_KEY") or persistent_secret(Path(settings.data_dir) / "secret.key"),
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        PERMANENT_SESSION_LIFETIME=timedelta(days=30),
    )
    app.session_interface = auth.CookieSessions()  # the login cookie (api/auth.py)
    bodies.install(app)  # every body read within size, depth and Unicode limits (api/bodies.py)
    assert isinstance(app.json, DefaultJSONProvider)  # bodies.install set the bounded one
    app.json.sort_keys = False
    install_services(app, build_services(settings, telemetry or build_telemetry(tracing_config(settings))))
    observe.init_app(app)  # each request a span under the caller's traceparent, when tracing is on
    init_database(app)
    register_error_handlers(app)
    turn_answers.init_app(app)  # a claim on a busy session answers 409 turn_in_progress (api/turns.py)
    rate_limits.init_app(app)  # RATE_LIMITS and MAX_STREAMS_PER_USER
    security_headers.init_app(app)
    blueprints: tuple[ModuleType, ...] = (
        settings_api,  # GET/PATCH /api/settings, GET /api/models (SPEC 17)
        *(
            auth,
            chat,
            tool_results,
            judge_api,
            sessions,
            export,
            search,
            streams,
            files,
            tools,
            health,
            profile,
            ui,
            instructor,
            memories,
            status,
        ),
        versions,  # regenerate, versions of a chat (SPEC 17)
        observe,  # GET /metrics (SPEC 16)
        openai_api,  # /v1: the OpenAI-compatible API (SPEC 11)
        openapi,  # GET /openapi.json and GET /docs (api/openapi/document.py)
        accounts,  # sign-up, the user's password and tokens (SPEC 17)
        admin,  # users and their tokens, for admins
    )
    for blueprint in (module.bp for module in blueprints):
        app.register_blueprint(blueprint)
    return app


def watch(
    telemetry: Telemetry, chat: FallbackChain, vision: FallbackChain, pool: WorkerPool, judge: Judge | None
) -> None:
    """What `/metrics` reads when scraped: the circuits of both chains, the sandbox and judge queues."""
    watched = telemetry.metrics.watched
    watched.chains.update(chat=chat, vision=vision)
    watched.gates["sandbox"] = lambda: pool.slots
    if judge is not None:
        watched.gates["judge"] = lambda: judge.runs


def turn_limits(settings: Settings) -> TurnLimits:
    """`TURN_WORKERS`, each user's share of them (`TURN_SHARE`), and `MAX_TURN_S`."""
    share = settings.turn_share or max(1, settings.turn_workers // 4)
    return TurnLimits(workers=settings.turn_workers, share=share, max_turn_s=settings.max_turn_s)


def build_services(settings: Settings, telemetry: Telemetry) -> Services:
    """Every service of one app, built once: the database (migrated, with an admin), the
    providers, the judge, the worker pool, the event bus and the turn machinery."""
    database = open_configured_store(settings)
    database.migrate()
    ensure_admin(database, settings.auth_token_file)
    registry = build_registry(database.dialect)
    mcp = build_hub(settings.mcp_servers, registry)  # MCP servers' tools join the registry (SPEC 14)
    chat_chain, vision_chain = build_chains(settings, telemetry)
    judge, judge_status = build_judge(settings, telemetry)
    # worker processes for untrusted work (SQL, regexes, pages), at most SANDBOX_WORKERS, started on first use
    bounded_pool = WorkerPool(settings.sandbox_workers)
    # events and active turns: in this process, or shared through Redis with REDIS_URL (live/backends.py)
    live = build_live(
        data_dir=settings.data_dir,
        heartbeat_s=settings.sse_heartbeat_s,
        redis_url=settings.redis_url,
        lease_s=settings.redis_turn_lease_s,
        streams_per_user=settings.max_streams_per_user,
    )
    turns = TurnServices(
        settings=settings,
        database=database,
        registry=registry,
        chat=chat_chain,
        vision=vision_chain,
        prompts=PromptBook(registry, load_persona(settings.system_prompt_file)),
        load_images=image_loader(settings.data_dir),
        judge=judge,
        bounded=bounded_pool,
        telemetry=telemetry,
    )
    watch(telemetry, chat_chain, vision_chain, bounded_pool, judge)
    passwords = Passwords()  # argon2 hashes, a few at once in this process (storage/passwords.py)
    telemetry.metrics.watched.gates["passwords"] = lambda: passwords.gate
    if passwords.clean_gate is not None:
        kept = passwords.clean_gate
        telemetry.metrics.watched.gates["passwords_kept"] = lambda: kept
    return Services(
        settings=settings,
        database=database,
        turns=turns,
        judge=judge,
        judge_status=judge_status,
        bounded=bounded_pool,
        provider_probe=ProviderProbe(chat_chain),
        live=live,
        desk=TurnDesk(
            database, live, turn_limits(settings), failure_event=turn_answers.error_event, telemetry=telemetry
        ),
        rate_limiter=RateLimiter(settings.rate_limits, settings.redis_url or "memory://"),
        stream_slots=live.seats,
        telemetry=telemetry,
        mcp=mcp,
        passwords=passwords,
    )


if __name__ == "__main__":
    from cli.main import build_cli  # the command line, given this module's app factory

    sys.exit(build_cli(create_app)())
