"""Server processes on one database behind a private nginx, as the multi-process tests and
operators run them (README "Running on several machines").

`cluster(folder, llm, n, **settings)` starts `n` real `python app.py` processes with
tests/multiprocess_support.py (one after the other: the first alone creates the database,
the admin and the cookie key, as the README says to), all with the same `settings` (e.g.
`REDIS_URL`) and the loopback model `llm`, on ports of this suite's range, then nginx in front
(tests/nginx_support.py, which adds `X-Upstream`: which process answered). `Cluster.aim(server)`
makes nginx's next request land on `server`: round robin, one nginx process and no other
client, so which process answers is decided by the test, and checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from testing.fake_llm import FakeLLMServer
from tests.live_client import READ_S
from tests.multiprocess_support import ServerProcess, server_env, start_server
from tests.nginx_support import Nginx, free_port, running_nginx
from tests.process_support import run_app, stop_process

BIND_TRIES = 3
LOST_BIND = "address already in use"  # uvicorn's words when the port was taken


def upstream(server: ServerProcess) -> str:
    """How nginx names `server` (its `X-Upstream`)."""
    return f"127.0.0.1:{server.port}"


@dataclass
class Cluster:
    """Server processes sharing one database (and one Redis, when `env` names it), nginx in front."""

    folder: Path
    env: dict[str, str]
    llm: FakeLLMServer
    servers: list[ServerProcess] = field(default_factory=list)
    nginx: Nginx | None = None

    @property
    def proxy(self) -> str:
        assert self.nginx is not None
        return self.nginx.base

    def start(self, name: str, **extra: str) -> ServerProcess:
        """One more process of the group (with `extra` settings of its own) on a free port (not
        behind nginx unless started before it). The port was free when picked, but this range lies among the kernel's ephemeral
        ports: a client connection may take it before the server binds it, so a lost bind is
        tried again on another port."""
        for attempt in range(1, BIND_TRIES + 1):
            retry = attempt < BIND_TRIES
            try:
                server = start_server(self.folder, name, {**self.env, **extra}, free_port())
            except (pytest.fail.Exception, OSError):  # it exited (or, gone, wrote no token)
                if retry and LOST_BIND in self.log(name):
                    continue
                raise
            if server.process.poll() is None:  # /health was answered by this process, not a stranger
                return server
            stop_process(server.process, server.log)
            if not (retry and LOST_BIND in self.log(name)):
                raise AssertionError(f"{name} exited after start:\n{self.log(name)[-4000:]}")
        raise AssertionError(f"{name} lost its port {BIND_TRIES} times")

    def log(self, name: str) -> str:
        path = self.folder / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def token(self, name: str) -> str:
        """The API token of a new user (each test its own: budgets and sessions are per user)."""
        made = run_app(self.env, "create-user", name)
        assert made.returncode == 0, made.stderr
        return made.stdout.strip().splitlines()[-1].strip()

    def user(self, name: str) -> dict[str, str]:
        """Bearer headers of a new user."""
        return {"Authorization": f"Bearer {self.token(name)}"}

    def aim(self, server: ServerProcess) -> None:
        """Make nginx's next proxied request land on `server` (of two): round robin, so ask
        /health until the other process answered it. The aimed request checks `X-Upstream`."""
        assert len(self.servers) == 2
        for _ in range(4):
            if requests.get(f"{self.proxy}/health", timeout=READ_S).headers["X-Upstream"] != upstream(server):
                return
        raise AssertionError(f"nginx answers only from {upstream(server)}")

    def other(self, server: ServerProcess) -> ServerProcess:
        return next(s for s in self.servers if s is not server)


@contextmanager
def cluster(
    folder: Path, llm: FakeLLMServer, processes: int, *, own_data_dirs: bool = False, **settings: str
) -> Iterator[Cluster]:
    """`processes` processes with `settings`, nginx in front. `own_data_dirs`: each process has
    a `DATA_DIR` of its own, as on separate hosts (then give them `DATABASE_URL` and `SECRET_KEY`)."""
    env = server_env(
        folder,
        LLM_PROVIDER="openai",
        LLM_BASE_URL=llm.openai_base_url,
        LLM_MODEL="m",
        SSE_HEARTBEAT_S="1",
        TRUSTED_PROXIES="127.0.0.1",  # nginx, on loopback: its X-Forwarded-For is the client's address
        **settings,
    )
    group = Cluster(folder, env, llm)
    with ExitStack() as stack:
        stack.callback(lambda: [stop_process(server.process, server.log) for server in group.servers])
        for index in range(processes):
            own = {"DATA_DIR": str(folder / f"host{index}")} if own_data_dirs else {}
            group.servers.append(group.start(f"server{index}", **own))
        group.nginx = stack.enter_context(running_nginx(folder / "nginx", [upstream(s) for s in group.servers]))
        yield group
