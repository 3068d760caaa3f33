"""Attacks on a running server, defined once: the hostile tests assert on them and
`bench/hostile.py` measures them.

Each area (SQL, parsing, input caps, per-user limits, faults) has a module here with
`ATTACKS: list[Attack]`. An attack performs its hostile request(s) against a `Target` (the real
server subprocess with a fake model and a fake web server on loopback, and two users) and
returns an `Outcome`: what the attacker got back. The caller measures everything else from
outside (peak memory and CPU of the server's process tree, a bystander's latency).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from testing.fake_llm import FakeLLMServer
from testing.fake_web import FakeWebServer
from testing.hostile import ServerUnderTest, running_server


@dataclass
class Target:
    server: ServerUnderTest
    llm: FakeLLMServer
    web: FakeWebServer
    attacker: str  # token of an ordinary user
    bystander: str  # token of another ordinary user

    def headers(self, token: str | None = None) -> dict[str, str]:
        return ServerUnderTest.auth(token or self.attacker)

    def post(self, path: str, token: str | None = None, timeout: float = 120, **kwargs: Any) -> requests.Response:
        return requests.post(f"{self.server.base}{path}", headers=self.headers(token), timeout=timeout, **kwargs)

    def get(self, path: str, token: str | None = None, timeout: float = 120, **kwargs: Any) -> requests.Response:
        return requests.get(f"{self.server.base}{path}", headers=self.headers(token), timeout=timeout, **kwargs)


@dataclass(frozen=True)
class Outcome:
    status: int  # HTTP status of the attacker's (last) request
    body_bytes: int  # size of that answer
    note: str = ""  # what happened, for the benchmark table (e.g. the error code)
    stored_bytes: int = 0  # the largest message the attack left in the session, where it applies


@dataclass(frozen=True)
class Attack:
    name: str  # short, e.g. "memory_sql: SELECT of large blobs"
    run: Callable[[Target], Outcome]
    deadline_s: float  # the product's own deadline for this work (CPU past it counts against the target)
    env: Mapping[str, str] = field(default_factory=dict)  # server settings this attack needs
    unhealthy_ok: bool = False  # the fault makes `/health` answer 503 meanwhile, as it should
    memory_mb: float = 100.0  # what the attack may add to the server's memory (one request's bound, SPEC 12)


@contextmanager
def hostile_target(tmp: Path, extra_env: Mapping[str, str] | None = None) -> Iterator[Target]:
    """A real server (fake OpenAI-compatible model, private fetches allowed so `/open_url` can
    reach the fake web server) with two ordinary users."""
    with FakeLLMServer(default_reply="plain answer") as llm, FakeWebServer() as web:
        # Attacks of other classes spend one attacker's turns back to back: the per-user
        # limits are tested by their own attacks, which set RATE_LIMITS themselves.
        env = {
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": llm.openai_base_url,
            "LLM_MODEL": "m",
            "ALLOW_PRIVATE_FETCH": "1",
            "RATE_LIMITS": "turns=off,sessions=off,tools=off",
            **dict(extra_env or {}),
        }
        with running_server(tmp, env) as server:
            yield Target(server, llm, web, server.create_user("mallory"), server.create_user("bob"))
