"""Serve the app: uvicorn (asyncio) in front of Flask, so open streams cost no thread.

One process. Ordinary requests run Flask on `WEB_THREADS` threads; turns run on their own
pool (`TURN_WORKERS`, `live/runner.py`); event streams and waits for a turn's end are written
from the event loop (`serving/asgi.py`), so thousands of idle streams leave every other
request as fast as before (SPEC 7a.6). Connections are bounded: a request must arrive
within `HEADER_TIMEOUT_S`, an idle kept-alive connection is closed after `KEEPALIVE_S`,
and past `MAX_CONNECTIONS` new requests answer 503. A client's address and scheme are the
connection's, unless it comes from one of `TRUSTED_PROXIES` (then its X-Forwarded-For and
X-Forwarded-Proto are believed). On SIGTERM (or SIGINT) the server stops
accepting, lets requests in flight finish (streams up to `GRACEFUL_TIMEOUT_S`), closes the
app's services (the judge's pool of containers: nothing is left on the engine), and the turn
workers finish their turns (and store their messages) before the process exits with 0.

uvicorn re-raises the stop signal once it has shut down, with the handler that was in place
before it started: the default one would kill the process there, before any clean-up or
`atexit` hook. So `serve` puts a handler in place first that only notes the signal.
"""

from __future__ import annotations

import gc
import logging
import resource
import signal
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn
from flask import Flask

from api.services import services_of
from config.settings import Settings
from serving.asgi import OrchestratorApp
from serving.gc_policy import FreezeAfterFullCollections
from serving.protocol import with_request_timeout

GRACEFUL_TIMEOUT_S = 30
BACKLOG = 4096

log = logging.getLogger("server")


def raise_open_file_limit(wanted: int) -> int:
    """Each connection is a file descriptor: lift the soft limit toward the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


def uvicorn_config(app: Flask, settings: Settings) -> uvicorn.Config:
    return uvicorn.Config(
        OrchestratorApp(app, threads=settings.web_threads),
        host=settings.host,
        port=settings.port,
        http=with_request_timeout(settings.header_timeout_s),
        loop="uvloop",  # asyncio on libuv: a worker thread waking the loop costs less (bench/README.md)
        lifespan="on",  # starts /mcp's task group (serving/asgi.py)
        timeout_keep_alive=int(max(1, settings.keepalive_s)),
        limit_concurrency=settings.max_connections,
        timeout_graceful_shutdown=GRACEFUL_TIMEOUT_S,
        backlog=BACKLOG,
        access_log=settings.access_log,
        log_level="info",
        # JSON lines: uvicorn's loggers go through the root logger's formatter (observe/logs.py)
        log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
        server_header=False,
        # X-Forwarded-For and -Proto only from the configured proxies: uvicorn's default trusts any
        # loopback peer, so a local client could claim a fresh address (a fresh login budget) per request
        proxy_headers=bool(settings.trusted_proxies),
        forwarded_allow_ips=settings.trusted_proxies or None,
    )


def serve(app: Flask, settings: Settings) -> None:
    limit = raise_open_file_limit(settings.max_connections + 256)
    if limit < settings.max_connections:
        log.warning("open file limit %d is below MAX_CONNECTIONS=%d", limit, settings.max_connections)
    server = uvicorn.Server(uvicorn_config(app, settings))
    # one server per port of a host: turns a previous run of this one left are ended now (live/redis_turns.py)
    services_of(app).live.serve_as(f"{socket.gethostname()}:{settings.port}")
    gc.collect()
    gc.freeze()  # start-up objects (modules, the app, the registry) leave every later full collection
    collections = FreezeAfterFullCollections()  # long-lived streams too (serving/gc_policy.py)
    collections.install()
    stops: list[int] = []
    previous = {sig: signal.signal(sig, _noting(stops)) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    finally:
        close_services(app)
        collections.uninstall()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if stops:
        log.info("stopped by %s", signal.Signals(stops[0]).name)


def close_services(app: Flask) -> None:
    """Release what the app holds outside this process: the judge's containers and the
    worker processes of untrusted work (`bounded/`)."""
    services_of(app).close()


def _noting(stops: list[int]) -> Callable[[int, FrameType | None], None]:
    """A signal handler that only records the signal (uvicorn calls it after its own shutdown)."""

    def note(signum: int, _: FrameType | None) -> None:
        stops.append(signum)

    return note
