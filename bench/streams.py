"""Many open streams and concurrent turns on one server (issue: UI and streams, Speed).

On loopback, in one run:
  1. one chat turn alone against a fake provider that takes 1 s per call (the baseline);
  2. 500 SSE subscribers on `/sessions/<id>/generate/stream` (10 per session, 50 sessions),
     held open long enough to receive heartbeats (SSE_HEARTBEAT_S=2 for the run);
  3. 50 concurrent chat turns, one per session, while the 500 streams watch them.
Reports: whether every turn completed, total time of the 50 turns vs the single turn
(target < 1.5x), heartbeats seen per stream, server memory per open stream (RSS growth /
streams), and the delay from an event's publication (the `: ts=` comment of each frame)
to its receipt (p50/p95; target p95 < 50 ms).

    .venv/bin/python bench/streams.py [--subscribers 500] [--turns 50]
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import free_port, percentile  # noqa: E402
from storage.db import Database  # noqa: E402
from storage.sessions import create_session  # noqa: E402
from storage.users import create_user  # noqa: E402
from testing.fake_llm import FakeLLMServer  # noqa: E402

HEARTBEAT_S = 2.0


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Subscriber(threading.Thread):
    """Reads one SSE stream until its `done` event; records delays and heartbeats."""

    def __init__(self, port: int, token: str, session_id: str, connected: threading.Semaphore) -> None:
        super().__init__(daemon=True)
        self.port, self.token, self.session_id, self.connected = port, token, session_id, connected
        self.delays_ms: list[float] = []
        self.heartbeats = 0
        self.done = False

    def run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("GET", f"/sessions/{self.session_id}/generate/stream",
                     headers={"Authorization": f"Bearer {self.token}", "Accept": "text/event-stream"})
        response = conn.getresponse()
        self.connected.release()
        ts = None
        while True:
            line = response.fp.readline()
            if not line:
                break
            text = line.decode().rstrip("\n")
            if text.startswith(": ts="):
                ts = float(text[5:])
            elif text.startswith("event: "):
                name = text[7:]
                if ts is not None:
                    self.delays_ms.append((time.time() - ts) * 1000)
                if name == "heartbeat":
                    self.heartbeats += 1
                elif name == "done":
                    self.done = True
                    break
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--subscribers", type=int, default=500)
    parser.add_argument("--turns", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(default_reply="Done.", delay_s=1.0) as llm:
        database = Database(Path(tmp) / "streams.db")
        database.migrate()
        with database.connection() as conn:
            _, token = create_user(conn, "bench")
            user_id = conn.execute("SELECT id FROM users WHERE name = 'bench'").fetchone()[0]
            sessions = [create_session(conn, user_id, f"s{i}").id for i in range(args.turns + 1)]
        port = free_port()
        env = {**os.environ, "PORT": str(port), "DATABASE_PATH": database.path, "DATA_DIR": tmp,
               "AUTH_TOKEN_FILE": str(Path(tmp) / "admin.token"), "LLM_PROVIDER": "openai",
               "LLM_BASE_URL": llm.openai_base_url, "LLM_MODEL": "bench",
               "WEB_THREADS": str(args.subscribers + args.turns + 64), "SSE_HEARTBEAT_S": str(HEARTBEAT_S)}
        server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            headers = {"Authorization": f"Bearer {token}"}
            base = f"http://127.0.0.1:{port}"
            for _ in range(300):
                try:
                    if requests.get(f"{base}/health", timeout=1).status_code:
                        break
                except requests.ConnectionError:
                    time.sleep(0.1)
            worker = int(subprocess.check_output(["pgrep", "-P", str(server.pid)]).split()[0])

            def turn(session_id: str) -> float:
                start = time.perf_counter()
                r = requests.post(f"{base}/chat", json={"message": "hi", "session_id": session_id},
                                  headers=headers, timeout=120)
                r.raise_for_status()
                return time.perf_counter() - start

            single = turn(sessions[-1])
            rss_before = rss_kb(worker)
            connected = threading.Semaphore(0)
            subscribers = [Subscriber(port, token, sessions[i % args.turns], connected) for i in range(args.subscribers)]
            for subscriber in subscribers:
                subscriber.start()
            for _ in subscribers:
                connected.acquire(timeout=60)
            time.sleep(HEARTBEAT_S * 1.5)  # every stream sees a heartbeat before the turns
            rss_open = rss_kb(worker)
            results: list[float | None] = [None] * args.turns
            threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, turn(sessions[i])))
                       for i in range(args.turns)]
            start = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
            total = time.perf_counter() - start
            for subscriber in subscribers:
                subscriber.join(timeout=30)
        finally:
            server.terminate()
            server.wait(timeout=30)

    delays = [delay for subscriber in subscribers for delay in subscriber.delays_ms]
    completed = sum(result is not None for result in results)
    print(f"streams benchmark: {args.subscribers} SSE subscribers, {args.turns} concurrent turns, provider 1 s/call\n")
    print(f"turns completed            {completed}/{args.turns}")
    print(f"single turn                {single * 1000:8.0f} ms")
    print(f"{args.turns} concurrent turns      {total * 1000:8.0f} ms   ratio {total / single:.2f}x (target < 1.5x)")
    print(f"streams that got done      {sum(s.done for s in subscribers)}/{args.subscribers}")
    print(f"heartbeats per stream      min {min(s.heartbeats for s in subscribers)}, "
          f"max {max(s.heartbeats for s in subscribers)} (interval {HEARTBEAT_S} s)")
    print(f"server RSS                 {rss_before / 1024:.1f} MB idle, {rss_open / 1024:.1f} MB with streams open "
          f"-> {(rss_open - rss_before) / args.subscribers:.1f} KB per stream")
    print(f"publication -> receipt     p50 {percentile(delays, .5):.1f} ms, p95 {percentile(delays, .95):.1f} ms, "
          f"max {max(delays):.1f} ms over {len(delays)} events (target p95 < 50 ms)")
    print(f"mean delay                 {statistics.mean(delays):.1f} ms")


if __name__ == "__main__":
    main()
