"""Thousands of idle open streams, and turns next to them (issue: live turns, Speed; SPEC 7a.6).

On loopback, in one run, against the real server (`python app.py`: uvicorn on asyncio in
front of Flask) and a fake provider that takes 1 s per call; the client is ONE process,
asyncio, hand-written HTTP/1.1:

  1. idle server: RSS and threads; `/health` latency; one streamed chat turn (the baseline);
  2. `--hold` sessions (100) each start a turn whose provider never answers (the fake sends
     headers and holds the stream): these keep streams open and idle. Figures again, and
     `--turns` (50) streamed turns at once, one per session, before any stream is open;
  3. `--streams` (10,000) `GET /sessions/<id>/generate/stream` spread over those sessions
     (100 each), each read until its first frame (then it is open); held until every stream
     got a heartbeat (SSE_HEARTBEAT_S, 15 s by default). RSS -> memory per stream (target
     under 20 KB), threads (must not grow with streams), `/health` (p99 target under 50 ms);
  4. with the streams open: one streamed turn, then `--turns` (50) streamed turns at once,
     one per session: total time vs the baseline turn (target under 1.5x) and the delay
     from each event's publication (the `: ts=` comment of each frame) to its receipt; then
     the same again with each turn followed by `--watchers` (10) more streams, opened as
     the turn starts (`?turn_id=`: a progress stream follows a running turn, so a watcher
     cannot connect before it), counting only the frames published after it was open;
  5. the held turns are cancelled (`POST /sessions/<id>/cancel`): every open stream must get
     its turn's `done` (the time until the last one did is the fan-out of 10,000 ends).

    .venv/bin/python bench/streams.py [--streams 10000] [--hold 100] [--turns 50] [--watchers 10]
    .venv/bin/python bench/streams.py --streams 1000                  # quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import testing.fake_llm as fake_llm  # noqa: E402
from bench.common import AsyncHTTP, Frame, percentile, proc_status, raise_open_files, start_server, stop_server  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.sessions import create_session  # noqa: E402
from storage.users import create_user  # noqa: E402
from testing.fake_llm import FakeLLMServer, StreamReply  # noqa: E402

PROVIDER_S = 1.0
HEALTH_REQUESTS = 200
RUN_LIMIT_S = 900.0  # the whole run
STALL_S = 60.0  # no progress for this long: the run fails instead of hanging
OPENING_AT_ONCE = 256  # connections being opened at the same time (the listen backlog is finite)
CLOCK = time.time() - time.monotonic()  # receipt times (monotonic) -> the server's ts clock


def serve_fake(control: Connection) -> None:
    """The fake provider, in its own process: the client's 10,000 sockets would otherwise
    share its descriptors (its hang-up check uses select(), limited to descriptors below
    1024) and its GIL. Commands from the bench: ("hold", n) queues n answers that send
    their headers and then nothing, until the server hangs up; ("requests",) counts the
    chat requests so far."""
    # A held answer polls its connection every POLL_S for the client hanging up; a slower
    # poll keeps 100 waiting threads from competing with the server for the 2 cores.
    fake_llm.POLL_S = 0.25
    with FakeLLMServer(default_reply="Done.", delay_s=PROVIDER_S) as llm:
        control.send(llm.openai_base_url)
        while True:
            try:
                command = control.recv()
            except EOFError:
                return
            if command[0] == "hold":
                llm.queue(*[StreamReply((), hang=True)] * command[1])
                control.send(True)
            elif command[0] == "requests":
                control.send(len(llm.requests))
            else:
                return


class FakeProvider:
    def __init__(self) -> None:
        self.control, child = multiprocessing.Pipe()
        self.process = multiprocessing.get_context("spawn").Process(target=serve_fake, args=(child,), daemon=True)
        self.process.start()
        self.base_url: str = self.control.recv()

    def ask(self, *command: object) -> object:
        self.control.send(command)
        return self.control.recv()

    def stop(self) -> None:
        self.control.send(("stop",))
        self.process.join(timeout=10)
        if self.process.is_alive():
            self.process.kill()


def ms(values: list[float]) -> str:
    return (
        f"p50 {percentile(values, 0.5):7.2f}  p95 {percentile(values, 0.95):7.2f}  p99 {percentile(values, 0.99):7.2f}"
    )


@dataclass(slots=True)
class HeldStream:
    opened: float = 0.0
    heartbeats: int = 0
    heartbeat_delays: list[float] = field(default_factory=list)
    done_at: float | None = None
    failed: str | None = None


@dataclass
class Bench:
    port: int
    token: str
    pid: int
    llm: FakeProvider
    args: argparse.Namespace
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def snapshot(self, name: str) -> dict[str, int]:
        status = proc_status(self.pid)
        self.figures[name] = status
        return status

    async def health(self) -> list[float]:
        """`GET /health` one after another on one kept-alive connection, in ms."""
        conn = await AsyncHTTP.connect(self.port)
        samples = []
        try:
            for _ in range(HEALTH_REQUESTS):
                start = time.perf_counter()
                status, _ = await conn.request("GET", "/health")
                samples.append((time.perf_counter() - start) * 1000)
                if status != 200:
                    raise SystemExit(f"/health answered {status}")
        finally:
            conn.close()
        return samples

    async def burst(self, count: int = 96) -> None:
        """Concurrent requests, so the pool of WEB_THREADS threads has started all its threads
        before the figures that must not count them."""

        async def one() -> None:
            conn = await AsyncHTTP.connect(self.port)
            await conn.request("GET", "/health")
            conn.close()

        await asyncio.gather(*[one() for _ in range(count)])

    async def turn(self, session_id: str, watchers: int = 0) -> tuple[float, list[float]]:
        """A streamed `POST /chat` read to its `done`: (seconds, publication -> receipt delays
        of its own frames and of its watchers' live frames)."""
        conn = await AsyncHTTP.connect(self.port)
        body = json.dumps({"message": "hi", "session_id": session_id}).encode()
        start = time.monotonic()
        await conn.send(
            "POST", "/chat", {**self.auth, "Accept": "text/event-stream", "Content-Type": "application/json"}, body
        )
        if await conn.read_head() != 200:
            raise SystemExit(f"POST /chat answered {conn.status}: {await conn.read_body()!r}")
        delays: list[float] = []
        watching: list[asyncio.Task[list[float]]] = []
        end = None
        async for frame in conn.frames():
            delays.append(delay(frame))
            if frame.name == "turn.started" and watchers:
                turn_id = frame.json()["turn_id"]
                watching = [asyncio.create_task(self.watch(session_id, turn_id)) for _ in range(watchers)]
            if frame.name in ("done", "error"):
                end = time.monotonic()
                if frame.name == "error":
                    raise SystemExit(f"turn failed: {frame.data[:300]}")
        conn.close()
        for watched in await asyncio.gather(*watching):
            delays += watched
        assert end is not None, "the turn's stream ended without done"
        return end - start, delays

    async def watch(self, session_id: str, turn_id: str) -> list[float]:
        """Follow a running turn (`?turn_id=`) to its end; delays of the frames published
        after this stream was open (the earlier ones are replayed, not live)."""
        conn = await AsyncHTTP.connect(self.port)
        await conn.send(
            "GET",
            f"/sessions/{session_id}/generate/stream?turn_id={turn_id}",
            {**self.auth, "Accept": "text/event-stream"},
        )
        await conn.read_head()
        open_at = time.time()
        delays = []
        async for frame in conn.frames():
            if frame.ts is not None and frame.ts > open_at:
                delays.append(delay(frame))
            if frame.name in ("done", "error"):
                break
        else:
            raise SystemExit("a watcher's stream ended without done")
        conn.close()
        return delays

    async def start_held_turn(self, session_id: str) -> str:
        """Start a turn whose provider never answers; returns its id (the POST is closed:
        closing a stream never cancels its turn)."""
        conn = await AsyncHTTP.connect(self.port)
        body = json.dumps({"message": "take your time", "session_id": session_id}).encode()
        await conn.send(
            "POST", "/chat", {**self.auth, "Accept": "text/event-stream", "Content-Type": "application/json"}, body
        )
        if await conn.read_head() != 200:
            raise SystemExit(f"POST /chat answered {conn.status}: {await conn.read_body()!r}")
        async for frame in conn.frames():
            if frame.name == "turn.started":
                conn.close()
                return str(frame.json()["turn_id"])
        raise SystemExit("held turn did not start")

    async def hold(
        self, session_id: str, held: HeldStream, gate: asyncio.Semaphore, opened: asyncio.Queue[int]
    ) -> None:
        """Open one progress stream, report it open at its first frame, then read it idle."""
        async with gate:
            for attempt in range(5):
                try:
                    conn = await AsyncHTTP.connect(self.port)
                    await conn.send(
                        "GET", f"/sessions/{session_id}/generate/stream", {**self.auth, "Accept": "text/event-stream"}
                    )
                    status = await conn.read_head()
                    break
                except OSError as error:
                    held.failed = repr(error)
                    await asyncio.sleep(0.2 * (attempt + 1))
            else:
                await opened.put(0)
                return
            if status != 200:
                held.failed = f"HTTP {status}"
                await opened.put(0)
                return
            frames = conn.frames()
            try:
                first = await anext(frames)
            except (StopAsyncIteration, OSError) as error:
                held.failed = f"closed before its first frame: {error!r}"
                await opened.put(0)
                return
            held.failed = None
            held.opened = first.received
            await opened.put(1)
        try:
            async for frame in frames:
                if frame.name == "heartbeat":
                    held.heartbeats += 1
                    held.heartbeat_delays.append(delay(frame))
                elif frame.name in ("done", "error"):
                    held.done_at = frame.received
                    break
        except OSError as error:
            held.failed = repr(error)
        finally:
            conn.close()


def delay(frame: Frame) -> float:
    """Publication (the frame's `: ts=`, the server's time.time()) -> receipt, in ms."""
    return (frame.received + CLOCK - frame.ts) * 1000 if frame.ts is not None else float("nan")


@dataclass
class Round:
    seconds: float
    completed: int
    turn_seconds: list[float]
    delays: list[float]  # publication -> receipt of live frames, ms


async def concurrent_turns(bench: Bench, sessions: list[str], watchers: int) -> Round:
    """One streamed turn per session, all at once, each followed by `watchers` more streams."""
    start = time.monotonic()
    results = await asyncio.wait_for(
        asyncio.gather(*[bench.turn(session, watchers) for session in sessions], return_exceptions=True), STALL_S
    )
    seconds = time.monotonic() - start
    delays: list[float] = []
    for result in results:
        if isinstance(result, BaseException):
            print(f"   a turn failed: {result!r}", flush=True)
        else:
            delays += result[1]
    done = [result[0] for result in results if not isinstance(result, BaseException)]
    return Round(seconds, len(done), done, delays)


async def run(bench: Bench, hold_sessions: list[str], turn_sessions: list[str], single_session: str) -> None:
    args, llm, figures = bench.args, bench.llm, bench.figures
    print(f"server pid {bench.pid}; 1. idle server", flush=True)
    bench.snapshot("idle")
    figures["health_idle"] = await bench.health()
    await bench.turn(single_session)  # warm-up: the provider connection, caches
    figures["single"], _ = await bench.turn(single_session)

    print(f"2. starting {len(hold_sessions)} held turns", flush=True)
    before = int(llm.ask("requests"))
    llm.ask("hold", len(hold_sessions))
    turn_ids = await asyncio.gather(*[bench.start_held_turn(session) for session in hold_sessions])
    while int(llm.ask("requests")) < before + len(hold_sessions):
        await asyncio.sleep(0.05)
    await asyncio.sleep(PROVIDER_S + 0.5)  # the fake takes its replies off the queue after its delay
    await bench.burst()
    print(f"   {args.turns} concurrent turns before the streams", flush=True)
    figures["round_before"] = await concurrent_turns(bench, turn_sessions, 0)
    bench.snapshot("held_turns")  # after the turns: their worker threads exist before the streams too
    figures["health_held"] = await bench.health()

    print(f"3. opening {args.streams} streams", flush=True)
    gate, opened = asyncio.Semaphore(OPENING_AT_ONCE), asyncio.Queue[int]()
    held = [HeldStream() for _ in range(args.streams)]
    start = time.monotonic()
    readers = [
        asyncio.create_task(bench.hold(hold_sessions[i % len(hold_sessions)], held[i], gate, opened))
        for i in range(args.streams)
    ]
    ok = 0
    for count in range(args.streams):
        try:
            ok += await asyncio.wait_for(opened.get(), STALL_S)
        except TimeoutError:
            raise SystemExit(f"no stream answered for {STALL_S:g} s ({count} answered): is the server stuck?") from None
        if (count + 1) % 2000 == 0:
            print(f"   {count + 1} answered ({ok} open) after {time.monotonic() - start:.1f} s", flush=True)
    figures["open_s"] = time.monotonic() - start
    figures["opened"] = ok
    if ok < args.streams:
        failures = {h.failed for h in held if h.failed}
        print(f"   {args.streams - ok} streams failed to open: {sorted(failures)[:3]}", flush=True)
    await asyncio.sleep(2)  # let allocations settle
    bench.snapshot("streams")
    figures["health_streams"] = await bench.health()
    wait_until = time.monotonic() + bench.args.heartbeat + 5
    while time.monotonic() < wait_until and any(h.heartbeats == 0 for h in held if h.opened):
        await asyncio.sleep(0.5)
    figures["heartbeat_wait_s"] = time.monotonic() - start - figures["open_s"]

    print(f"4. one turn, then {args.turns} concurrent turns with the streams open", flush=True)
    figures["single_streams"], _ = await bench.turn(single_session)
    figures["round"] = await concurrent_turns(bench, turn_sessions, 0)
    if args.watchers:
        print(f"   again, each turn followed by {args.watchers} more streams", flush=True)
        figures["watched"] = await concurrent_turns(bench, turn_sessions, args.watchers)
    bench.snapshot("after_turns")
    figures["health_after"] = await bench.health()

    print(f"5. cancelling the {len(hold_sessions)} held turns", flush=True)
    cancelled = 0
    start = time.monotonic()

    async def cancel(session_id: str, turn_id: str) -> int:
        conn = await AsyncHTTP.connect(bench.port)
        body = json.dumps({"turn_id": turn_id}).encode()
        status, _ = await conn.request(
            "POST", f"/sessions/{session_id}/cancel", {**bench.auth, "Content-Type": "application/json"}, body
        )
        conn.close()
        return int(status == 200)

    cancelled = sum(await asyncio.gather(*[cancel(s, t) for s, t in zip(hold_sessions, turn_ids, strict=True)]))
    if readers:
        _, pending = await asyncio.wait(readers, timeout=60)
        for task in pending:
            task.cancel()
    figures["cancelled"] = cancelled
    ends = [h.done_at for h in held if h.done_at is not None]
    figures["fanout_s"] = (max(ends) - start) if ends else float("nan")
    figures["held"] = held


def report(bench: Bench) -> None:
    args, f = bench.args, bench.figures
    held: list[HeldStream] = f["held"]
    idle, with_held, with_streams, after = f["idle"], f["held_turns"], f["streams"], f["after_turns"]
    opened = int(f["opened"])
    per_stream = (with_streams["VmRSS"] - with_held["VmRSS"]) / max(1, opened)
    heartbeats = [h.heartbeats for h in held if h.opened]
    hb_delays = [d for h in held for d in h.heartbeat_delays]
    single = float(f["single"])
    print(
        f"\nstreams benchmark: {args.streams} idle streams over {args.hold} held turns, then "
        f"{args.turns} concurrent turns x {args.watchers} watchers; provider {PROVIDER_S:g} s/call, "
        f"heartbeat {args.heartbeat:g} s\n"
    )
    print(
        f"streams open                 {opened}/{args.streams} in {f['open_s']:.1f} s "
        f"({opened / float(f['open_s']):.0f}/s)"
    )
    print(
        f"server RSS                   idle {idle['VmRSS'] / 1024:.1f} MB, {args.hold} held turns "
        f"{with_held['VmRSS'] / 1024:.1f} MB, + streams {with_streams['VmRSS'] / 1024:.1f} MB, "
        f"after the turns {after['VmRSS'] / 1024:.1f} MB"
    )
    print(f"memory per open stream       {per_stream:.1f} KB (target < 20 KB)")
    print(
        f"server threads               idle {idle['Threads']}, held turns {with_held['Threads']}, "
        f"+ streams {with_streams['Threads']}, after the turns {after['Threads']}"
    )
    print(f"/health ms, idle             {ms(f['health_idle'])}")
    print(f"/health ms, held turns       {ms(f['health_held'])}")
    print(f"/health ms, streams open     {ms(f['health_streams'])}  (target p99 < 50 ms)")
    print(f"/health ms, after the turns  {ms(f['health_after'])}")
    print(
        f"heartbeats per stream        min {min(heartbeats, default=0)}, max {max(heartbeats, default=0)} "
        f"(held {float(f['heartbeat_wait_s']):.0f} s more after the last opened); "
        f"heartbeat ts -> receipt {ms(hb_delays)} ({len(hb_delays)})"
    )
    print(
        f"single turn                  {single * 1000:.0f} ms idle, "
        f"{float(f['single_streams']) * 1000:.0f} ms with the streams open"
    )
    rounds: list[tuple[str, Round]] = [
        (f"{args.turns} turns, no stream open", f["round_before"]),
        (f"{args.turns} turns, streams open", f["round"]),
    ]
    if "watched" in f:
        rounds.append((f"  + {args.watchers} watchers each", f["watched"]))
    for name, result in rounds:
        print(
            f"{name:29}{result.seconds * 1000:.0f} ms, completed {result.completed}/{args.turns}: ratio "
            f"{result.seconds / single:.2f}x the idle single turn (target < 1.5x); per turn "
            f"p50 {percentile(result.turn_seconds, 0.5) * 1000:.0f} ms"
        )
        print(
            f"  publication -> receipt     {ms(result.delays)}  max {max(result.delays, default=0):.1f} "
            f"({len(result.delays)} live frames)"
        )
    got_done = sum(h.done_at is not None for h in held)
    print(
        f"cancel the held turns        {f['cancelled']}/{args.hold} cancelled; streams that got their done "
        f"{got_done}/{args.streams}, the last {float(f['fanout_s']) * 1000:.0f} ms after the first cancel"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=10_000, help="idle streams held open")
    parser.add_argument("--hold", type=int, default=100, help="sessions with a held turn the streams follow")
    parser.add_argument("--turns", type=int, default=50, help="concurrent streamed turns")
    parser.add_argument("--watchers", type=int, default=10, help="streams following each concurrent turn")
    parser.add_argument("--heartbeat", type=float, default=15.0, help="SSE_HEARTBEAT_S of the server")
    args = parser.parse_args()
    limit = raise_open_files()
    needed = args.streams + args.turns * (args.watchers + 1) + args.hold + 256
    if limit < needed:
        raise SystemExit(f"open file limit {limit} is below the {needed} this run needs")
    llm = FakeProvider()
    with tempfile.TemporaryDirectory() as tmp:
        database = Database(Path(tmp) / "streams.db")
        database.migrate()
        with database.connection() as conn:
            user, token = create_user(conn, "bench")
            sessions = [create_session(conn, user.id, f"s{i}").id for i in range(args.hold + args.turns + 1)]
        env = {
            "SSE_HEARTBEAT_S": str(args.heartbeat),
            "LLM_TIMEOUT_S": "3600",
            "TURN_WORKERS": str(args.hold + args.turns + 16),
            "TURN_SHARE": str(args.hold + args.turns + 16),  # one user holds them all
        }  # a running turn holds a worker thread
        server, port = start_server(tmp, database.path, llm.base_url, env)
        bench = Bench(port, token, server.pid, llm, args)
        try:
            asyncio.run(
                asyncio.wait_for(run(bench, sessions[: args.hold], sessions[args.hold : -1], sessions[-1]), RUN_LIMIT_S)
            )
        finally:
            stop_server(server)
            llm.stop()
    report(bench)


if __name__ == "__main__":
    main()
