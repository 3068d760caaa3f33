"""Server processes on one database behind a private nginx, as the multi-process tests and
operators run them (README "Running on several machines").

`cluster(folder, llm, n, **settings)` starts `n` real `python app.py` processes one after the
other (the first alone creates the database, the admin and the cookie key, as the README
says to), all with the same `settings` (e.g. `REDIS_URL`) and the loopback model `llm`, then
nginx in front (tests/nginx_support.py, which adds `X-Upstream`: which process answered).
`Cluster.aim(server)` makes nginx's next request land on `server`: round robin, one nginx
process, and no other client, so which process answers is decided by the test, and checked.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import requests

from testing.fake_llm import FakeLLMServer
from tests.live_client import READ_S
from tests.nginx_support import Nginx, free_port, running_nginx
from tests.process_support import stop_process, wait_until_serving
from tests.test_cli import ROOT, clean_env, run_app


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    log: IO[str]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"


def start_server(folder: Path, name: str, env: dict[str, str]) -> Server:
    port = free_port()
    log_path = folder / f"{name}.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env={**env, "PORT": str(port)}, stdout=log, stderr=subprocess.STDOUT
    )
    wait_until_serving(process, f"http://127.0.0.1:{port}/health", log_path)
    return Server(process, port, log)


@dataclass
class Cluster:
    """Server processes sharing one database (and one Redis, when `env` names it), nginx in front."""

    folder: Path
    env: dict[str, str]
    llm: FakeLLMServer
    servers: list[Server] = field(default_factory=list)
    nginx: Nginx | None = None

    @property
    def proxy(self) -> str:
        assert self.nginx is not None
        return self.nginx.base

    def start(self, name: str) -> Server:
        """One more process; the first one alone creates the database, the admin and the cookie key."""
        server = start_server(self.folder, name, self.env)
        self.servers.append(server)
        return server

    def token(self, name: str) -> str:
        """The API token of a new user (each test its own: budgets and sessions are per user)."""
        made = run_app(self.env, "create-user", name)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip().splitlines()[-1].strip()

    def user(self, name: str) -> dict[str, str]:
        """Bearer headers of a new user."""
        return {"Authorization": f"Bearer {self.token(name)}"}

    def aim(self, server: Server) -> None:
        """Make nginx's next proxied request land on `server` (of two): round robin, so ask
        /health until the other process answered it. The aimed request checks `X-Upstream`."""
        assert len(self.servers) == 2
        for _ in range(4):
            if requests.get(f"{self.proxy}/health", timeout=READ_S).headers["X-Upstream"] != server.addr:
                return
        raise AssertionError(f"nginx answers only from {server.addr}")

    def other(self, server: Server) -> Server:
        return next(s for s in self.servers if s is not server)


@contextmanager
def cluster(folder: Path, llm: FakeLLMServer, processes: int, **settings: str) -> Iterator[Cluster]:
    env = clean_env(
        folder,
        {"database_path": folder / "app.db", "data_dir": folder, "auth_token_file": folder / "admin.token"},
        LLM_PROVIDER="openai",
        LLM_BASE_URL=llm.openai_base_url,
        LLM_MODEL="m",
        SSE_HEARTBEAT_S="1",
        **settings,
    )
    group = Cluster(folder, env, llm)
    with ExitStack() as stack:
        stack.callback(lambda: [stop_process(server.process, server.log) for server in group.servers])
        for index in range(processes):
            group.start(f"server{index}")
        group.nginx = stack.enter_context(running_nginx(folder / "nginx", [s.addr for s in group.servers]))
        yield group
