"""A private, real redis-server for the REDIS_URL tests (scripts/services/redis.sh installs it).

`redis_server` (session scope) starts `redis-server` on loopback on a free port of this
suite's range (30000-30499, testing/ports.py), without persistence, in a temporary directory, and stops it at
the end. `redis_url` (per test) empties it first (FLUSHALL), so every test starts from an
empty Redis. Without the binary the tests skip, or fail under `CI=true` or
`REDIS_REQUIRED=1`. `RedisServer.restart()` stops and starts the same server on the same
port: all of its data is gone, as after a crash of a Redis without persistence.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from live import Live
from live.backends import build_live
from live.redis_bus import RedisEventLog
from live.redis_conn import RedisLink
from testing.ports import REDIS, free_port
from tests.process_support import stop_process

PORTS = REDIS  # testing/ports.py: below the ephemeral ports, a slice per xdist worker
START_TIMEOUT_S = 20
PREFIX = "test:"


def redis_required() -> bool:
    ci = os.environ.get("CI", "")
    return (ci != "" and ci.lower() not in ("0", "false")) or os.environ.get("REDIS_REQUIRED") == "1"


@dataclass
class RedisServer:
    port: int
    directory: Path
    process: subprocess.Popen[Any] | None = field(default=None)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.directory / "redis.log").open("a")
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                "--protected-mode",
                "yes",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                try:
                    client.ping()
                    answering = client.info("server")["process_id"]
                    if answering != self.process.pid:  # ours failed to bind: never share another's
                        raise RuntimeError(f"port {self.port} is taken by redis-server pid {answering}")
                    return
                except redis.RedisError:
                    if self.process.poll() is not None or time.monotonic() > deadline:
                        tail = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                        raise RuntimeError(f"redis-server did not start:\n{tail}") from None
                    time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def flush(self) -> None:
        client = redis.Redis.from_url(self.url)
        try:
            client.flushall()
        finally:
            client.close()


def redis_log(url: str, **options: Any) -> tuple[RedisEventLog, Callable[[], None]]:
    """A Redis event log as one server process would have it (its own link and listener
    thread), and how to close it; several of them on one URL behave as several processes."""
    link = RedisLink.connect(url, PREFIX)
    log = RedisEventLog(link, **options)
    link.start()
    return log, link.close


def redis_live(url: str, data_dir: str, *, lease_s: float = 30.0, heartbeat_s: float = 15.0) -> Live:
    """`Live` (events and turns) as one server process builds it with REDIS_URL; `close()` it."""
    return build_live(data_dir=data_dir, heartbeat_s=heartbeat_s, redis_url=url, lease_s=lease_s, prefix=PREFIX)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        message = "redis-server is not installed (scripts/services/redis.sh installs it)"
        if redis_required():
            pytest.fail(message)
        pytest.skip(message)
    server = RedisServer(free_port(PORTS), tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The private server's URL, emptied for this test."""
    if redis_server.process is None:
        redis_server.start()
    redis_server.flush()
    return redis_server.url
