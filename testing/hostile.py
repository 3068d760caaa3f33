"""A real server under attack: start it, measure it, and watch a bystander meanwhile.

Shared by `tests/hostile/test_*.py` (assertions on memory, size, status and other users'
service) and `bench/hostile.py` (the figures). Everything is measured from outside the server
process, as an operator would see it: the RSS and CPU time of the server's process tree from
`/proc`, and a second user's requests answered (or not) while the attack runs.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import requests

from config.settings import Settings
from testing.ports import free_port as free_port  # the one allocator, re-exported

ROOT = Path(__file__).resolve().parent.parent
_SETTING_NAMES = {name.upper() for name in Settings.model_fields}
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def server_env(tmp: Path, port: int, extra: Mapping[str, str]) -> dict[str, str]:
    """os.environ without any product setting, the server's paths in `tmp`, then `extra`."""
    env = {
        key: value for key, value in os.environ.items() if key not in _SETTING_NAMES and not key.endswith("_API_KEY")
    }
    env.update(
        PORT=str(port),
        DATABASE_PATH=str(tmp / "app.db"),
        DATA_DIR=str(tmp),
        AUTH_TOKEN_FILE=str(tmp / "admin.token"),
        PYTHONUNBUFFERED="1",
        JUDGE_ENABLED="0",
    )
    env.update(extra)
    return env


# --------------------------------------------------------------------------- /proc


def _stat_fields(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()  # fields from the 3rd (state) on


def process_tree(root: int) -> list[int]:
    """`root` and every live descendant (children found through each process's parent id)."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int(_stat_fields(int(entry.name))[1])
            except (OSError, ValueError, IndexError):
                continue
            parents.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(parents.get(pid, ()))
    return tree


def tree_rss_kb(root: int) -> int:
    """Resident memory of the process tree, KB (a process that just exited counts 0)."""
    total = 0
    for pid in process_tree(root):
        try:
            total += int(_stat_fields(pid)[21]) * _PAGE_KB  # rss, in pages
        except (OSError, ValueError, IndexError):
            continue
    return total


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) used by the tree so far, reaped children included."""
    total = 0
    for pid in process_tree(root):
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / _TICKS


# --------------------------------------------------------------------------- the server


@dataclass
class ServerUnderTest:
    process: subprocess.Popen[Any]
    port: int
    tmp: Path
    env: dict[str, str]
    admin_token: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def auth(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def create_user(self, name: str, role: str = "user") -> str:
        """A new user through the CLI, as an operator makes one; returns its token."""
        result = subprocess.run(
            [sys.executable, "app.py", "create-user", name, "--role", role],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            raise RuntimeError(f"create-user {name} failed ({result.returncode}): {result.stderr[-2000:]}")
        return result.stdout.strip().splitlines()[-1]

    def rss_kb(self) -> int:
        return tree_rss_kb(self.process.pid)

    def cpu_s(self) -> float:
        return tree_cpu_s(self.process.pid)

    def log(self) -> str:
        path = self.tmp / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextmanager
def running_server(
    tmp: Path, extra_env: Mapping[str, str] | None = None, timeout_s: float = 30
) -> Iterator[ServerUnderTest]:
    """`python app.py` on a free loopback port, its files in `tmp`; stopped on exit."""
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = server_env(tmp, port, dict(extra_env or {}))
    log = (tmp / "server.log").open("w")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                requests.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except requests.RequestException as error:
                if process.poll() is not None or time.monotonic() > deadline:
                    log_tail = (tmp / "server.log").read_text()[-4000:]
                    raise RuntimeError(f"the server did not start:\n{log_tail}") from error
                time.sleep(0.1)
        yield ServerUnderTest(process, port, tmp, env, (tmp / "admin.token").read_text().strip())
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


# --------------------------------------------------------------------------- watching an attack


@dataclass
class PeakMemory:
    """Samples the server tree's RSS every `every_s` while the block runs."""

    server: ServerUnderTest
    every_s: float = 0.01
    baseline_kb: int = 0
    peak_kb: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def added_mb(self) -> float:
        return max(0, self.peak_kb - self.baseline_kb) / 1024

    def _sample(self) -> None:
        while not self._stop.wait(self.every_s):
            self.peak_kb = max(self.peak_kb, self.server.rss_kb())

    def __enter__(self) -> PeakMemory:
        self.baseline_kb = self.peak_kb = self.server.rss_kb()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kb = max(self.peak_kb, self.server.rss_kb())


@dataclass
class Bystander:
    """Another user going about their business during an attack: `request` (by default
    `GET /health`) again and again, each latency and failure recorded."""

    server: ServerUnderTest
    request: Callable[[], requests.Response] | None = None
    pause_s: float = 0.02
    timeout_s: float = 10.0
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _call(self) -> requests.Response:
        if self.request is not None:
            return self.request()
        return requests.get(f"{self.server.base}/health", timeout=self.timeout_s)

    def _loop(self) -> None:
        while not self._stop.is_set():
            start = time.perf_counter()
            try:
                response = self._call()
                if response.status_code >= 500:
                    self.failures.append(f"{response.status_code}: {response.text[:200]}")
            except requests.RequestException as error:
                self.failures.append(repr(error))
            self.latencies_ms.append((time.perf_counter() - start) * 1000)
            self._stop.wait(self.pause_s)

    def percentile_ms(self, q: float) -> float:
        if not self.latencies_ms:
            return float("nan")
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]

    @property
    def worst_ms(self) -> float:
        return max(self.latencies_ms, default=float("nan"))

    def __enter__(self) -> Bystander:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def _watch_from_outside(url: str, pause_s: float, timeout_s: float, control: Connection) -> None:
    """The loop of a `ProcessBystander`, in its own process: GET `url` until told to stop."""
    latencies: list[float] = []
    failures: list[str] = []
    http = requests.Session()
    control.send("ready")
    while not control.poll(pause_s):
        start = time.perf_counter()
        try:
            response = http.get(url, timeout=timeout_s)
            if response.status_code >= 500:
                failures.append(f"{response.status_code}: {response.text[:200]}")
        except requests.RequestException as error:
            failures.append(repr(error))
        latencies.append((time.perf_counter() - start) * 1000)
    control.send((latencies, failures))


@dataclass
class ProcessBystander(Bystander):
    """A `Bystander` of `GET /health` in a process of its own: what it measures is the
    server's latency, not the attacking client's (a client building a 40 MB body in the same
    process holds the GIL its bystander thread needs)."""

    def __enter__(self) -> ProcessBystander:
        self._control, child = multiprocessing.get_context("spawn").Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=_watch_from_outside,
            args=(f"{self.server.base}/health", self.pause_s, self.timeout_s, child),
            daemon=True,
        )
        self._process.start()
        if self._control.recv() != "ready":
            raise RuntimeError("the bystander process did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self._control.send("stop")
        self.latencies_ms, self.failures = self._control.recv()
        self._process.join(timeout=10)
