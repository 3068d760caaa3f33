"""Helpers shared by the benchmark scripts: ports, timing, percentiles, the server under
test, its process figures, and server-sent events read by hand (sync and asyncio)."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(call: Callable[[], object], count: int) -> list[float]:
    """Milliseconds of `count` sequential calls."""
    samples = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


def p50_p95(values: list[float]) -> str:
    return f"p50 {percentile(values, 0.5):7.2f}  p95 {percentile(values, 0.95):7.2f}"


# --------------------------------------------------------------------------- the server


def raise_open_files() -> int:
    """Lift this process's soft limit on open files to the hard limit (many connections)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS (KB) and Threads of a process, from /proc/<pid>/status."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            found[key] = int(value.split()[0])
    return found


#: One bench user does what hundreds of users would: per-user limits would answer 429.
NO_USER_LIMITS = {"RATE_LIMITS": "turns=off,sessions=off,runs=off,generate=off", "MAX_STREAMS_PER_USER": "1000000"}


def start_server(
    tmp: str,
    database_path: str,
    llm_base_url: str,
    extra_env: Mapping[str, str] = (),
    timeout_s: float = 30,
    *,
    root: Path = ROOT,
    python: str = sys.executable,
) -> tuple[subprocess.Popen[bytes], int]:
    """The real server (`python app.py`, one process) on a free port; returns it and its port
    once `/health` answers. The judge is off so its pool does not compete for the CPU.
    `root` and `python` run another checkout instead (a side-by-side comparison)."""
    port = free_port()
    env = {
        **os.environ,
        "PORT": str(port),
        "DATABASE_PATH": database_path,
        "DATA_DIR": tmp,
        "AUTH_TOKEN_FILE": str(Path(tmp) / "admin.token"),
        "LLM_PROVIDER": "openai",
        "LLM_BASE_URL": llm_base_url,
        "LLM_MODEL": "bench",
        "JUDGE_ENABLED": "0",
        **NO_USER_LIMITS,
        **dict(extra_env),
    }
    server = subprocess.Popen(
        [python, "app.py"], cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as answer:
                if answer.status:
                    return server, port
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit("server did not start")
        time.sleep(0.1)


def stop_server(server: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    server.terminate()
    try:
        server.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


# --------------------------------------------------------------------------- server-sent events


@dataclass
class Frame:
    """One SSE frame as a client sees it, with its receipt time (time.monotonic())."""

    name: str
    data: str
    id: str | None
    ts: float | None  # the server's publication time (time.time()), from the `: ts=` comment
    received: float

    def json(self) -> Any:
        return json.loads(self.data) if self.data else None


class SSEParser:
    """Lines in, frames out (comments other than `: ts=` and `retry:` are skipped)."""

    def __init__(self) -> None:
        self._name: str | None = None
        self._data: list[str] = []
        self._id: str | None = None
        self._ts: float | None = None

    def line(self, text: str, received: float) -> Frame | None:
        text = text.rstrip("\r\n")
        if not text:
            if self._name is None and not self._data:
                self._ts = None
                return None
            frame = Frame(self._name or "message", "\n".join(self._data), self._id, self._ts, received)
            self._name, self._data, self._id, self._ts = None, [], None, None
            return frame
        if text.startswith(": ts="):
            self._ts = float(text[5:])
        elif text.startswith("event: "):
            self._name = text[7:]
        elif text.startswith("data: "):
            self._data.append(text[6:])
        elif text.startswith("id: "):
            self._id = text[4:]
        return None


class AsyncHTTP:
    """One hand-written HTTP/1.1 client connection on asyncio: cheap enough for thousands."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.status = 0
        self.headers: dict[str, str] = {}

    @classmethod
    async def connect(cls, port: int, host: str = "127.0.0.1") -> AsyncHTTP:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def send(self, method: str, path: str, headers: Mapping[str, str] = (), body: bytes = b"") -> None:
        head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
        head += [f"{name}: {value}" for name, value in dict(headers).items()]
        if body or method == "POST":
            head.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await self.writer.drain()

    async def read_head(self) -> int:
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
        return self.status

    async def read_body(self) -> bytes:
        """The whole body (Content-Length or chunked), leaving the connection reusable."""
        if "content-length" in self.headers:
            return await self.reader.readexactly(int(self.headers["content-length"]))
        return b"".join([chunk async for chunk in self.chunks()])

    async def chunks(self) -> AsyncIterator[bytes]:
        if self.headers.get("transfer-encoding", "").lower() != "chunked":
            while data := await self.reader.read(65536):
                yield data
            return
        while True:
            size_line = await self.reader.readline()
            if not size_line:
                return
            size = int(size_line.split(b";")[0], 16)
            if size == 0:
                await self.reader.readline()
                return
            data = await self.reader.readexactly(size)
            await self.reader.readexactly(2)
            yield data

    async def frames(self) -> AsyncIterator[Frame]:
        parser, pending = SSEParser(), b""
        async for data in self.chunks():
            received = time.monotonic()
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                frame = parser.line(line.decode(), received)
                if frame is not None:
                    yield frame

    async def request(
        self, method: str, path: str, headers: Mapping[str, str] = (), body: bytes = b""
    ) -> tuple[int, bytes]:
        await self.send(method, path, headers, body)
        status = await self.read_head()
        return status, await self.read_body()

    def close(self) -> None:
        self.writer.close()
