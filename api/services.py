"""The app's long-lived services, typed, in one frozen value (issue 13 item 1).

`create_app` builds each service once and stores this value with `install`; request code
reads it through `services()` (tests and the CLI through `services_of(app)`). One accessor,
one key: a handler never looks a service up by a string, and a type checker sees what each
field holds. Every field's type comes from below the HTTP layer (live/, providers, storage/,
pipeline/, judge/, bounded/), so no api module this one serves is imported back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from flask import Flask, current_app

from storage.passwords import Passwords

if TYPE_CHECKING:
    from bounded.pool import WorkerPool
    from config.settings import Settings
    from judge.service import Judge
    from live import Live
    from live.desk import TurnDesk
    from live.limits import RateLimiter, StreamSeats
    from mcp_client.hub import McpHub
    from observe.telemetry import Telemetry
    from pipeline.results import TurnServices
    from providers import ProviderProbe
    from storage.connection import Store

SERVICES_KEY = "services"  # the services' one `app.extensions` key (api/openapi/document.py caches its document apart)


@dataclass(frozen=True)
class Services:
    """Everything a request handler may use that outlives the request."""

    settings: Settings
    database: Store
    turns: TurnServices  # what a turn needs: registry, provider chains, prompt, tool services
    judge: Judge | None  # None when Docker is off or JUDGE_ENABLED=0; `judge_status` says why
    judge_status: dict[str, object]  # {"available": bool, "reason": str} as create_app found it
    bounded: WorkerPool  # worker processes for untrusted SQL, regexes and pages
    provider_probe: ProviderProbe
    live: Live  # the event bus and the turn registry (SSE, SPEC 7)
    desk: TurnDesk  # where every turn starts: the claim on its session, fair workers, its time limit
    rate_limiter: RateLimiter  # RATE_LIMITS (SPEC 12)
    stream_slots: StreamSeats  # MAX_STREAMS_PER_USER (counted across processes with Redis: `live.seats`)
    telemetry: Telemetry  # traces, metrics (SPEC 16, observe/)
    mcp: McpHub | None = None  # MCP servers' connections (SPEC 14); None when MCP_SERVERS names none
    passwords: Passwords = field(default_factory=Passwords)  # argon2, a few hashes at once (SPEC 17)

    def close(self) -> None:
        """Release what lives outside this process: the judge's containers, the pool's workers,
        Redis links, idle connections to the model servers."""
        if self.mcp is not None:
            self.mcp.close()  # stdio children stopped, HTTP sessions ended
        if self.judge is not None:
            self.judge.close()
        self.turns.chat.close()
        self.turns.vision.close()
        self.bounded.close()
        self.desk.close()  # the turn workers
        self.live.close()  # a Redis backend's listener thread and connections
        self.database.close()  # a PostgreSQL store's connection pool
        self.telemetry.close()  # the spans still buffered go to the collector


def install(app: Flask, services: Services) -> None:
    app.extensions[SERVICES_KEY] = services


def services_of(app: Flask) -> Services:
    found = app.extensions[SERVICES_KEY]
    assert isinstance(found, Services), "create_app stores the app's Services"
    return found


def services() -> Services:
    """The current app's services (inside a request or an app context)."""
    return services_of(current_app)
