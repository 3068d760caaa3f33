"""Several real server processes (`python app.py`) sharing one database and one Redis.

`server_processes(folder, count, **settings)` starts `count` processes one after the other
(the first alone creates the database, the admin and its token, the cookie key), each on its
own free port of `ports`, all with the same settings (e.g. `REDIS_URL`), and stops them all
(SIGTERM, then SIGKILL) at the end. `ServerProcess.auth` is the admin's bearer header.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from testing.ports import free_port
from tests.process_support import ROOT, clean_env, stop_process, wait_until_serving
from tests.redis_support import PORTS


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log: IO[Any]
    token: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def server_env(folder: Path, **settings: str) -> dict[str, str]:
    """The environment of every process of one group: one database, one data dir, `settings`."""
    paths = {"database_path": folder / "app.db", "data_dir": folder, "auth_token_file": folder / "admin.token"}
    return clean_env(folder, paths, **settings)


def start_server(folder: Path, name: str, env: dict[str, str], port: int) -> ServerProcess:
    log_path = folder / f"{name}.log"
    log = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env={**env, "PORT": str(port)}, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        wait_until_serving(process, f"http://127.0.0.1:{port}/health", log_path)
    except BaseException:
        stop_process(process, log)
        raise
    return ServerProcess(process, port, log, (folder / "admin.token").read_text().strip())


@contextmanager
def server_processes(folder: Path, count: int, ports: range = PORTS, **settings: str) -> Iterator[list[ServerProcess]]:
    env = server_env(folder, **settings)
    servers: list[ServerProcess] = []
    with ExitStack() as stack:
        stack.callback(lambda: [stop_process(server.process, server.log) for server in servers])
        for index in range(count):
            port = free_port(ports, taken=tuple(server.port for server in servers))
            servers.append(start_server(folder, f"server{index}", env, port))
        yield servers
