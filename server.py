"""Serve the app with gunicorn (threaded worker), not Flask's development server.

One worker process with many threads: a turn spends almost all its time waiting on the
provider's HTTP answer, so threads keep other users (and their streams) responsive while
every request still gets its own SQLite connection. Shutdown is graceful: on SIGTERM the
worker stops accepting and lets requests in flight finish (up to `graceful_timeout`),
so a turn in progress still stores its messages.
"""

from __future__ import annotations

from typing import Any

from flask import Flask
from gunicorn.app.base import BaseApplication

from config import Settings

DEFAULT_THREADS = 32
GRACEFUL_TIMEOUT_S = 30


class GunicornServer(BaseApplication):  # type: ignore[misc]
    def __init__(self, app: Flask, options: dict[str, Any]) -> None:
        self.application = app
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return self.application


def serve(app: Flask, settings: Settings) -> None:
    options = {
        "bind": f"{settings.host}:{settings.port}",
        "workers": 1,
        "worker_class": "gthread",
        "threads": settings.web_threads,
        "timeout": int(settings.llm_timeout_s * (settings.max_tool_rounds + 1) * 2 + 60),
        "graceful_timeout": GRACEFUL_TIMEOUT_S,
        "keepalive": 5,
        "accesslog": "-" if settings.access_log else None,
        "errorlog": "-",
        "loglevel": "info",
    }
    GunicornServer(app, options).run()
