"""Side by side with the peer people would pick: Open WebUI and us, the same fake model (issue 24).

One run, on loopback. Each server has its own copy of the same fake OpenAI-compatible model
(`testing/fake_llm.py` in a process of its own, answering at once with the same streamed
reply), so a held request of one never costs the other's fake anything:

  1. plain chat turns, interleaved (ours, theirs, the order alternating), one at a time, each
     preceded by a raw streamed call to that server's fake (its own latency):
     - ours: a streamed `POST /chat` in a fresh session, read to its `done` (what our web UI
       sends; the user message and the answer are stored);
     - Open WebUI: a streamed `POST /api/chat/completions` (`model`, `messages`, `stream`) in a
       fresh chat (`chat_id`, `user_message`), read to `data: [DONE]`. Without a message id it
       streams the answer over HTTP and stores the user message in the chat, not the answer,
       and runs no background task (title, tags, follow-ups): its web frontend's path (the
       answer over socket.io and saved) does more work, so this is the cheapest turn it serves.
     Added latency = turn - raw call, at the same percentile; CPU per turn = user + system CPU
     of the server's whole process tree (/proc) over the turns, divided by the turns.
  2. memory with `--held` (1,000) open streams each: the same number of streamed turns whose
     model sent its headers and then holds (the fake stalls), sent 20 at a time (Open WebUI on
     its default SQLite answers 400 "database is locked" to part of 100 sent at once), each
     batch once the fake is answering all the turns so far: RSS of the server's process tree
     before and with them all held. For us each is a running turn (one turn worker thread,
     `TURN_WORKERS` sized for them) and its open stream; for Open WebUI a chat completion it is
     waiting on. (Our progress streams that follow a turn without running one cost less: see
     `streams.py`.)

    .venv/bin/python bench/peers.py [--turns 200] [--held 1000] [--venv ~/.cache/openwebui-venv]
    .venv/bin/python bench/peers.py --ours-only     # when Open WebUI cannot be installed or started

Open WebUI's venv: `scripts/openwebui_check.sh` creates it (`open-webui==0.12.4`, Python 3.11).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from openwebui_check import open_webui  # noqa: E402

import testing.fake_llm as fake_llm  # noqa: E402
from bench.common import percentile, raise_open_files, start_server, stop_server  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.sessions import create_session  # noqa: E402
from storage.users import create_user  # noqa: E402
from testing.fake_llm import FakeLLMServer, StreamReply  # noqa: E402

REPLY = "Sure. Here is a plain answer of a dozen words or so, nothing more."
PIECE_CHARS = 4  # the fake streams the reply in pieces of this many characters
READ_S = 60.0
SETTLE_S = 3.0
MAX_TURN_WORKERS = 1024
HOLD_WAIT_S = 60.0  # for a batch of held turns to reach the fake
HOLD_BATCH = 20  # held turns sent at once (Open WebUI on SQLite refuses many at once: "database is locked")
PROGRESS_S = 30.0  # after the held streams opened, before their memory is read
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


# --------------------------------------------------------------------------- the fake model


def serve_fake(control: Connection) -> None:
    """The fake model in a process of its own. Commands: ("hold", n) queues n answers that
    send their headers and then nothing until the client hangs up; ("stop",)."""
    fake_llm.POLL_S = 0.25  # a held answer checks for a hang-up 4 times a second (1,000 are held)
    with FakeLLMServer(default_reply=REPLY, piece_chars=PIECE_CHARS) as llm:
        control.send(llm.openai_base_url)
        while True:
            try:
                command = control.recv()
            except EOFError:
                return
            if command[0] == "hold":
                llm.queue(*[StreamReply((), hang=True)] * command[1])
                control.send(True)
            elif command[0] == "in_flight":
                control.send(llm.in_flight)
            else:
                return


class Fake:
    def __init__(self) -> None:
        self.control, child = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("spawn").Process(target=serve_fake, args=(child,), daemon=True)
        self.process.start()
        self.base_url: str = self.control.recv()

    def hold(self, count: int) -> None:
        self.control.send(("hold", count))
        self.control.recv()

    def in_flight(self) -> int:
        """Chat requests the fake is answering now (held ones included)."""
        self.control.send(("in_flight",))
        return int(self.control.recv())

    def stop(self) -> None:
        self.control.send(("stop",))
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()

    def raw_turn(self, session: requests.Session) -> float:
        """One streamed completion straight from the fake, read to `[DONE]`: seconds."""
        body = {"model": "fake", "messages": [{"role": "user", "content": "hello"}], "stream": True}
        start = time.perf_counter()
        with session.post(f"{self.base_url}/chat/completions", json=body, stream=True, timeout=READ_S) as answer:
            answer.raise_for_status()
            for line in answer.iter_lines():
                if line == b"data: [DONE]":
                    break
        return time.perf_counter() - start


# --------------------------------------------------------------------------- process figures


def process_tree(pid: int) -> list[int]:
    """`pid` and its live descendants."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
                todo += [int(child) for child in children]
        except OSError:
            continue
    return found


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the live processes of `pid`'s tree."""
    ticks = 0
    for member in process_tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / CLOCK_TICKS


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid`'s tree (each process's RSS, summed), MB."""
    kb = 0
    for member in process_tree(pid):
        try:
            kb += int(Path(f"/proc/{member}/statm").read_text().split()[1]) * PAGE_KB
        except OSError:
            continue
    return kb / 1024


# --------------------------------------------------------------------------- the two servers


@dataclass
class Side:
    """One server under test: how a turn is sent to it and how a held stream is opened."""

    name: str
    pid: int
    fake: Fake
    base: str
    headers: dict[str, str]
    turn: Callable[[requests.Session, str], float]
    new_conversation: Callable[[], str]
    held_request: Callable[[str], bytes]  # the raw HTTP request of one held stream, for a conversation
    stored_answer: Callable[[str], str]  # the answer the server stored in a conversation
    latencies: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    figures: dict[str, float] = field(default_factory=dict)


def read_sse_until(answer: requests.Response, end: Callable[[bytes], bool]) -> None:
    if answer.status_code != 200:
        raise SystemExit(f"{answer.url} answered {answer.status_code}: {answer.text[:500]}")
    for line in answer.iter_lines():
        if end(line):
            return
    raise SystemExit(f"{answer.url}: the stream ended early")


def ours(base: str, token: str, pid: int, fake: Fake, sessions: Iterator[str]) -> Side:
    headers = {"Authorization": f"Bearer {token}"}

    def turn(client: requests.Session, session_id: str) -> float:
        body = {"message": "hello", "session_id": session_id}
        start = time.perf_counter()
        stream_headers = {**headers, "Accept": "text/event-stream"}
        with client.post(f"{base}/chat", json=body, headers=stream_headers, stream=True, timeout=READ_S) as answer:
            read_sse_until(answer, lambda line: line in (b"event: done", b"event: error"))
        return time.perf_counter() - start

    def held(session_id: str) -> bytes:
        body = json.dumps({"message": "take your time", "session_id": session_id}).encode()
        return (
            f"POST /chat HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Accept: text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    def stored_answer(session_id: str) -> str:
        found = requests.get(f"{base}/sessions/{session_id}/messages", headers=headers, timeout=30).json()
        answers = [m for m in found["messages"] if m["role"] == "assistant"]
        return str(answers[0]["content"]) if len(answers) == 1 else ""

    return Side("ours", pid, fake, base, headers, turn, lambda: next(sessions), held, stored_answer)


def theirs(base: str, pid: int, fake: Fake) -> Side:
    # With WEBUI_AUTH=false, signin with any body makes (or logs in) the admin
    signin = requests.post(f"{base}/api/v1/auths/signin", json={"email": "", "password": ""}, timeout=30)
    signin.raise_for_status()
    token = signin.json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    models = requests.get(f"{base}/api/models", headers=headers, timeout=60).json()["data"]
    if not any(model["id"] == "fake" for model in models):
        raise SystemExit(f"Open WebUI does not list the fake model: {[m['id'] for m in models]}")

    def new_chat() -> str:
        chat = {"title": "bench", "models": ["fake"], "messages": [], "history": {"messages": {}, "currentId": None}}
        made = requests.post(f"{base}/api/v1/chats/new", json={"chat": chat}, headers=headers, timeout=30)
        made.raise_for_status()
        return str(made.json()["id"])

    def body_for(chat_id: str, text: str) -> dict[str, Any]:
        """What its web frontend sends for the first message of a chat (`Chat.svelte`), without a
        socket.io session and without background tasks."""
        message = {"id": str(uuid.uuid4()), "parentId": None, "childrenIds": [], "role": "user", "content": text}
        message |= {"timestamp": int(time.time()), "models": ["fake"]}
        return {
            "model": "fake",
            "messages": [{"role": "user", "content": text}],
            "stream": True,
            "params": {},
            "features": {},
            "chat_id": chat_id,
            "id": str(uuid.uuid4()),  # the answer's message id: Open WebUI stores the answer under it
            "parent_id": None,
            "user_message": message,
            "background_tasks": {},
        }

    def turn(client: requests.Session, chat_id: str) -> float:
        start = time.perf_counter()
        answer = client.post(
            f"{base}/api/chat/completions", json=body_for(chat_id, "hello"), headers=headers, timeout=READ_S
        )
        if answer.status_code != 200:
            raise SystemExit(f"Open WebUI answered {answer.status_code}: {answer.text[:500]}")
        return time.perf_counter() - start

    def stored_answer(chat_id: str) -> str:
        chat = requests.get(f"{base}/api/v1/chats/{chat_id}", headers=headers, timeout=30).json()
        messages = chat["chat"]["history"]["messages"].values()
        answers = [m for m in messages if m["role"] == "assistant"]
        return str(answers[0]["content"]) if len(answers) == 1 and answers[0].get("done") else ""

    def held(chat_id: str) -> bytes:
        body = json.dumps(body_for(chat_id, "take your time")).encode()
        return (
            f"POST /api/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    return Side("Open WebUI", pid, fake, base, headers, turn, new_chat, held, stored_answer)


# --------------------------------------------------------------------------- the run


def turns(sides: list[Side], count: int) -> None:
    """`count` turns on each side, interleaved, each after a raw call to its fake; CPU per side."""
    clients = {side.name: requests.Session() for side in sides}
    raw_clients = {side.name: requests.Session() for side in sides}
    conversations = {side.name: [side.new_conversation() for _ in range(count + 5)] for side in sides}
    for side in sides:  # warm-up: connections, caches, lazy imports; and each stores the answer
        for conversation in conversations[side.name][count:]:
            side.fake.raw_turn(raw_clients[side.name])
            side.turn(clients[side.name], conversation)
            if side.stored_answer(conversation) != REPLY:
                raise SystemExit(f"{side.name} did not store the answer: {side.stored_answer(conversation)!r}")
    before = {side.name: tree_cpu_s(side.pid) for side in sides}
    for index in range(count):
        order = sides if index % 2 == 0 else sides[::-1]
        for side in order:
            side.raw.append(side.fake.raw_turn(raw_clients[side.name]))
            side.latencies.append(side.turn(clients[side.name], conversations[side.name][index]))
        if (index + 1) % 50 == 0:
            print(f"   {index + 1}/{count} turns each", flush=True)
    for side in sides:
        side.cpu_s = tree_cpu_s(side.pid) - before[side.name]


async def hold_streams(
    side: Side, count: int, wait_s: float
) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """`count` streamed turns, `HOLD_BATCH` at a time: the next batch is sent once the fake is
    answering every turn so far (or after `wait_s`). Held means the model is answering it;
    Open WebUI answers its frontend's request only when the turn ends, so no head is awaited."""
    port = int(side.base.rsplit(":", 1)[1])
    conversations = [side.new_conversation() for _ in range(count)]
    side.fake.hold(count)
    base_in_flight = side.fake.in_flight()
    streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    started = time.monotonic()
    report_at = started + PROGRESS_S
    for first in range(0, count, HOLD_BATCH):
        batch = conversations[first : first + HOLD_BATCH]
        opened = await asyncio.gather(*[asyncio.open_connection("127.0.0.1", port) for _ in batch])
        for (reader, writer), conversation in zip(opened, batch, strict=True):
            writer.write(side.held_request(conversation))
            streams.append((reader, writer))
        await asyncio.gather(*[writer.drain() for _, writer in streams[first:]])
        deadline = time.monotonic() + wait_s
        while (reached := side.fake.in_flight() - base_in_flight) < len(streams):
            if time.monotonic() > deadline:
                print(f"   {side.name}: the fake answers {reached} of {len(streams)} after {wait_s:g} s", flush=True)
                break
            if time.monotonic() > report_at:
                print(f"   {side.name}: the fake answers {reached}/{count}", flush=True)
                report_at += PROGRESS_S
            await asyncio.sleep(0.05)
    side.figures["hold_s"] = time.monotonic() - started
    return streams


async def answer_line(reader: asyncio.StreamReader) -> str | None:
    """The first line of what the server sent back already (None: nothing, the turn is held)."""
    try:
        data = await asyncio.wait_for(reader.read(256), 0.05)
    except TimeoutError:
        return None
    return data.split(b"\r\n", 1)[0].decode(errors="replace") or "closed"


def held_memory(side: Side, count: int, wait_s: float) -> None:
    side.figures["rss_before"] = tree_rss_mb(side.pid)

    async def run() -> None:
        streams = await hold_streams(side, count, wait_s)
        side.figures["held"] = side.fake.in_flight()
        await asyncio.sleep(SETTLE_S)
        side.figures["rss_held"] = tree_rss_mb(side.pid)
        answered: dict[str, int] = {}  # requests that were refused instead of held: their status lines
        for line in await asyncio.gather(*[answer_line(reader) for reader, _ in streams]):
            if line is not None and not line.startswith("HTTP/1.1 200"):  # our streams answer their head at once
                answered[line] = answered.get(line, 0) + 1
        if answered:
            print(f"   {side.name}: answered instead of held: {answered}", flush=True)
        for _, writer in streams:
            writer.close()

    asyncio.run(run())


def ms(values: list[float], q: float) -> float:
    return percentile(values, q) * 1000


def report(sides: list[Side], args: argparse.Namespace) -> None:
    print(f"\npeers: {args.turns} plain streamed turns each, interleaved; {args.held} held streams each\n")
    print("| measure | " + " | ".join(side.name for side in sides) + " |")
    print("|---|" + "---|" * len(sides))
    rows: list[tuple[str, Callable[[Side], str]]] = [
        ("fake's own latency p50 / p95, ms", lambda s: f"{ms(s.raw, 0.5):.2f} / {ms(s.raw, 0.95):.2f}"),
        ("turn latency p50 / p95, ms", lambda s: f"{ms(s.latencies, 0.5):.2f} / {ms(s.latencies, 0.95):.2f}"),
        (
            "added latency p50 / p95, ms",
            lambda s: f"{ms(s.latencies, 0.5) - ms(s.raw, 0.5):.2f} / {ms(s.latencies, 0.95) - ms(s.raw, 0.95):.2f}",
        ),
        ("server CPU per turn, ms", lambda s: f"{s.cpu_s / args.turns * 1000:.2f}"),
    ]
    if args.held:
        rows += [
            (
                "held streams open (seconds until all reached the fake)",
                lambda s: f"{s.figures.get('held', 0):.0f}/{args.held} ({s.figures.get('hold_s', 0):.1f} s)",
            ),
            ("RSS of the process tree before, MB", lambda s: f"{s.figures.get('rss_before', 0):.1f}"),
            (f"RSS with {args.held} held streams, MB", lambda s: f"{s.figures.get('rss_held', 0):.1f}"),
            (
                "per held stream, KB",
                lambda s: f"{(s.figures.get('rss_held', 0) - s.figures.get('rss_before', 0)) * 1024 / args.held:.1f}",
            ),
        ]
    for name, cell in rows:
        print(f"| {name} | " + " | ".join(cell(side) for side in sides) + " |")
    if len(sides) == 2:
        ratio = sides[0].cpu_s / sides[1].cpu_s if sides[1].cpu_s else float("nan")
        verdict = "met" if ratio <= 0.2 else "missed"
        print(f"\nour CPU per turn / Open WebUI's: {ratio:.3f} (target <= 0.2: {verdict})")


@contextmanager
def our_server(tmp: Path, fake: Fake, sessions: int, held: int) -> Iterator[Side]:
    database = Database(tmp / "ours.db")
    database.migrate()
    with database.connection() as conn:
        user, token = create_user(conn, "bench")
        ids = [create_session(conn, user.id, f"s{i}").id for i in range(sessions)]
    # a held turn holds a worker thread (TURN_WORKERS is at most 1,024)
    # one user holds them all here: their share of the workers is all of them (TURN_SHARE)
    workers = str(min(MAX_TURN_WORKERS, held + 16))
    env = {"LLM_TIMEOUT_S": "600", "TURN_WORKERS": workers, "TURN_SHARE": workers}
    server, port = start_server(str(tmp), str(database.path), fake.base_url, env)
    try:
        yield ours(f"http://127.0.0.1:{port}", token, server.pid, fake, iter(ids))
    finally:
        stop_server(server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200, help="plain turns on each server")
    parser.add_argument("--held", type=int, default=1000, help="held streams on each server (0: none)")
    parser.add_argument("--venv", type=Path, default=Path.home() / ".cache" / "openwebui-venv")
    parser.add_argument("--ours-only", action="store_true", help="run against us only")
    parser.add_argument(
        "--hold-wait", type=float, default=HOLD_WAIT_S, help="seconds for a batch of held turns to start"
    )
    parser.add_argument("--owui-log", type=Path, help="keep Open WebUI's log here")
    args = parser.parse_args()
    if raise_open_files() < 4 * args.held + 1024:
        raise SystemExit("the open file limit is too low for --held")
    with tempfile.TemporaryDirectory(prefix="peers-") as tmp_name, ExitStack() as stack:
        tmp = Path(tmp_name)
        fakes = [Fake(), Fake()]
        stack.callback(lambda: [fake.stop() for fake in fakes])
        sides = [stack.enter_context(our_server(tmp, fakes[0], args.turns + args.held + 10, args.held))]
        if not args.ours_only:
            if not (args.venv / "bin" / "open-webui").exists():
                raise SystemExit(f"no Open WebUI in {args.venv} (scripts/openwebui_check.sh installs it)")
            owui_dir = tmp / "open-webui"
            owui_dir.mkdir()
            base = stack.enter_context(open_webui(args.venv, fakes[1].base_url, "fake-key", owui_dir, tmp / "owui.log"))
            pid = owui_pid(int(base.rsplit(":", 1)[1]))
            sides.append(theirs(base, pid, fakes[1]))
        print(f"1. {args.turns} turns each: " + ", ".join(f"{s.name} pid {s.pid}" for s in sides), flush=True)
        turns(sides, args.turns)
        for side in sides:
            if args.held:
                print(f"2. {args.held} held streams on {side.name}", flush=True)
                held_memory(side, args.held, args.hold_wait)
        report(sides, args)
        if args.owui_log and (tmp / "owui.log").exists():
            args.owui_log.write_text((tmp / "owui.log").read_text(errors="replace"))


def owui_pid(port: int) -> int:
    """The process listening on `port` (Open WebUI's `open-webui serve`), from /proc/net/tcp."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
            inodes.add(fields[9])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    return int(pid)
        except OSError:
            continue
    raise SystemExit(f"no process listens on {port}")


if __name__ == "__main__":
    main()
