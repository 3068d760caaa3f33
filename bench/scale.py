"""What do PostgreSQL, Redis and a second server process cost and buy? (issue 14, Speed)

In one run, on loopback, against a fake OpenAI-compatible provider that answers at once:

  overhead   plain turns (`POST /chat`, one provider call) on three servers side by side,
             interleaved so drift hits all alike: SQLite (the embedded default), PostgreSQL
             (`DATABASE_URL`), PostgreSQL + Redis (`DATABASE_URL` + `REDIS_URL`). Added overhead =
             turn latency minus a raw provider call, at the same percentile (as turn_overhead.py).
  throughput turns per second through nginx with 1 and then 2 server processes behind it
             (PostgreSQL + Redis, so the two behave as one), `--clients` concurrent clients, each
             on its own session, for `--seconds` each; the two configurations alternate
             `--rounds` times.

Every server is the real product (`python app.py`) in a subprocess; PostgreSQL, Redis and nginx
are private instances started the way the tests start them (tests/pg_support.py,
tests/redis_support.py, tests/nginx_support.py: Debian's packages, temp dirs, loopback ports).
All of it shares this machine's cores with the clients and the fake provider, so the
throughput figures are an upper bound on what one more core buys, not a cluster's.

    .venv/bin/python bench/scale.py [--turns 200] [--clients 8] [--seconds 10] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import percentile, start_server, stop_server, timed  # noqa: E402
from testing.fake_llm import FakeLLMServer  # noqa: E402
from tests.nginx_support import running_nginx  # noqa: E402
from tests.pg_support import PgCluster, start_cluster  # noqa: E402
from tests.redis_support import RedisServer, free_port_in_range  # noqa: E402


@dataclass(frozen=True)
class Server:
    """One running server process: where it listens and the admin's token."""

    name: str
    base: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@contextmanager
def server(tmp: Path, name: str, llm_url: str, env: dict[str, str], token: str | None = None) -> Iterator[Server]:
    """`python app.py` with its own DATA_DIR and `env`, stopped on exit. The admin's token is the
    one it wrote on first start, or `token` (a second process on a database that has its admin)."""
    data = tmp / name
    data.mkdir(parents=True, exist_ok=True)
    process, port = start_server(str(data), str(data / "app.db"), llm_url, env)
    try:
        yield Server(name, f"http://127.0.0.1:{port}", token or (data / "admin.token").read_text().strip())
    finally:
        stop_server(process)


def new_session(http: requests.Session, target: Server, base: str | None = None) -> str:
    """A session of its own (one turn at a time per session, SPEC 4)."""
    answer = http.post(f"{base or target.base}/sessions", json={}, headers=target.headers, timeout=10)
    answer.raise_for_status()
    return str(answer.json()["id"])


def plain_turn(http: requests.Session, base: str, target: Server, session_id: str) -> None:
    answer = http.post(
        f"{base}/chat", json={"message": "hello", "session_id": session_id}, headers=target.headers, timeout=30
    )
    answer.raise_for_status()


# --------------------------------------------------------------------------- overhead


def overhead(servers: list[Server], llm: FakeLLMServer, turns: int) -> None:
    http = requests.Session()
    sessions = {s.name: new_session(http, s) for s in servers}
    plain_turn(http, servers[0].base, servers[0], sessions[servers[0].name])
    raw_body = llm.requests[-1]  # the exact body a plain turn sends

    def raw() -> None:
        http.post(f"{llm.openai_base_url}/chat/completions", json=raw_body, timeout=10).raise_for_status()

    def turn_of(target: Server) -> None:
        plain_turn(http, target.base, target, sessions[target.name])

    for target in servers:  # warm-up: connections, caches, pools
        timed(lambda t=target: turn_of(t), 20)  # type: ignore[misc]
    timed(raw, 20)
    samples: dict[str, list[float]] = {"raw": []} | {s.name: [] for s in servers}
    for _ in range(turns):  # interleaved
        samples["raw"] += timed(raw, 1)
        for target in servers:
            samples[target.name] += timed(lambda t=target: turn_of(t), 1)  # type: ignore[misc]

    print(f"a. plain turn overhead, {turns} turns each, interleaved\n")
    print(f"{'':28}{'p50 ms':>9}{'p95 ms':>9}{'added p50':>11}{'added p95':>11}{'x SQLite p50':>14}")
    raw50, raw95 = percentile(samples["raw"], 0.5), percentile(samples["raw"], 0.95)
    print(f"{'raw provider call':28}{raw50:9.2f}{raw95:9.2f}")
    sqlite_added = percentile(samples[servers[0].name], 0.5) - raw50
    for target in servers:
        p50, p95 = percentile(samples[target.name], 0.5), percentile(samples[target.name], 0.95)
        print(
            f"{target.name:28}{p50:9.2f}{p95:9.2f}{p50 - raw50:11.2f}{p95 - raw95:11.2f}"
            f"{(p50 - raw50) / sqlite_added:13.2f}x"
        )
    print()


# --------------------------------------------------------------------------- throughput


def throughput(nginx_base: str, target: Server, clients: int, seconds: float) -> tuple[float, list[float]]:
    """Turns per second and per-turn latencies of `clients` closed-loop clients through nginx,
    counted from the moment every client has its session and one warm turn behind it."""
    latencies: list[float] = []
    lock = threading.Lock()
    warm = threading.Barrier(clients + 1)
    go = threading.Event()
    stop_at = [0.0]

    def client() -> None:
        http = requests.Session()
        session_id = new_session(http, target, nginx_base)
        plain_turn(http, nginx_base, target, session_id)
        mine: list[float] = []
        warm.wait()
        go.wait()
        while time.monotonic() < stop_at[0]:
            began = time.perf_counter()
            plain_turn(http, nginx_base, target, session_id)
            mine.append((time.perf_counter() - began) * 1000)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    warm.wait()
    began = time.monotonic()
    stop_at[0] = began + seconds
    go.set()
    for thread in threads:
        thread.join()
    return len(latencies) / (time.monotonic() - began), latencies


def scaling(tmp: Path, llm: FakeLLMServer, shared: dict[str, str], args: argparse.Namespace) -> None:
    with ExitStack() as stack:
        first = stack.enter_context(server(tmp, "proc-1", llm.openai_base_url, shared))
        second = stack.enter_context(server(tmp, "proc-2", llm.openai_base_url, shared, first.token))
        backends = {
            1: [first.base.removeprefix("http://")],
            2: [first.base.removeprefix("http://"), second.base.removeprefix("http://")],
        }
        results: dict[int, list[tuple[float, list[float]]]] = {1: [], 2: []}
        for round_ in range(args.rounds):
            for count in (1, 2):
                with running_nginx(tmp / f"nginx-{count}-{round_}", backends[count]) as nginx:
                    results[count].append(throughput(nginx.base, first, args.clients, args.seconds))
    print(
        f"b. throughput through nginx, PostgreSQL + Redis, {args.clients} clients, "
        f"{args.seconds:g} s per run, {args.rounds} rounds (alternating)\n"
    )
    print(f"{'':22}{'turns/s (each run)':>26}{'p50 ms':>9}{'p95 ms':>9}")
    for count in (1, 2):
        rates = [rate for rate, _ in results[count]]
        latencies = [ms for _, run in results[count] for ms in run]
        label = f"{count} process{'es' if count > 1 else ''}"
        shown = " / ".join(f"{rate:.1f}" for rate in rates)
        print(f"{label:22}{shown:>26}{percentile(latencies, 0.5):9.2f}{percentile(latencies, 0.95):9.2f}")
    one = sum(rate for rate, _ in results[1]) / len(results[1])
    two = sum(rate for rate, _ in results[2]) / len(results[2])
    print(f"\n2 processes / 1 process: {two / one:.2f}x turns per second")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scale-")))
        llm = stack.enter_context(FakeLLMServer(default_reply="Sure, here you go."))
        cluster: PgCluster = start_cluster()
        stack.callback(cluster.stop)
        redis_dir = tmp / "redis"
        redis_dir.mkdir()
        redis_server = RedisServer(port=free_port_in_range(), directory=redis_dir)
        redis_server.start()
        stack.callback(redis_server.stop)

        with ExitStack() as three:  # stopped before the scaling runs, which get the cores to themselves
            pg_alone = {"DATABASE_URL": cluster.create_database("bench_pg")}
            pg_redis = {"DATABASE_URL": cluster.create_database("bench_pg_redis"), "REDIS_URL": redis_server.url}
            servers = [
                three.enter_context(server(tmp, "SQLite", llm.openai_base_url, {})),
                three.enter_context(server(tmp, "PostgreSQL", llm.openai_base_url, pg_alone)),
                three.enter_context(server(tmp, "PostgreSQL + Redis", llm.openai_base_url, pg_redis)),
            ]
            overhead(servers, llm, args.turns)
        shared = {"DATABASE_URL": cluster.create_database("bench_scale"), "REDIS_URL": redis_server.url}
        scaling(tmp, llm, shared, args)


if __name__ == "__main__":
    main()
