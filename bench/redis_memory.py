"""What does a finished turn cost in Redis's memory? (issue 24, REDIS_URL sizing)

The real product (`python app.py`) on a private redis-server (tests/redis_support.py) and a fake
OpenAI-compatible model that streams each answer in `--pieces` pieces of 20 characters. Plain
`POST /chat` turns, `--turns` in each of `--sessions` sessions; Redis's own figure for the
product's keys (`MEMORY USAGE key SAMPLES 0`, summed over every key under the prefix) is taken
before and after, and divided by the number of turns. Several cases in one run.

    .venv/bin/python bench/redis_memory.py [--cases 1x1x50,40x1x50,40x50x1,200x1x20]

A case is `pieces x sessions x turns`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import redis
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from live.redis_conn import DEFAULT_PREFIX
from testing.fake_llm import FakeLLMServer, StreamReply
from tests.multiprocess_support import server_env, start_server
from tests.process_support import free_port, stop_process
from tests.redis_support import PORTS, RedisServer

PIECE = "word " * 4  # 20 characters, about 5 tokens


def memory(client: redis.Redis) -> int:
    return sum(client.memory_usage(key, samples=0) or 0 for key in client.scan_iter(f"{DEFAULT_PREFIX}*"))


def run_case(folder: Path, redis_url: str, pieces: int, sessions: int, turns: int) -> tuple[float, float]:
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    with FakeLLMServer(default_reply="x") as llm:
        env = server_env(
            folder,
            REDIS_URL=redis_url,
            LLM_PROVIDER="openai",
            LLM_BASE_URL=llm.openai_base_url,
            LLM_MODEL="m",
            RATE_LIMITS="turns=off,sessions=off",
        )
        server = start_server(folder, f"case-{pieces}-{sessions}-{turns}", env, free_port())
        try:
            made = [
                requests.post(f"{server.base}/sessions", json={}, headers=server.auth, timeout=30)
                for _ in range(sessions)
            ]
            ids = [answer.json()["id"] for answer in made]
            before = memory(client)
            for session_id in ids:
                for _ in range(turns):
                    llm.queue(StreamReply(pieces=(PIECE,) * pieces))
                    body = {"message": "question " * 10, "session_id": session_id}
                    answer = requests.post(f"{server.base}/chat", json=body, headers=server.auth, timeout=60)
                    answer.raise_for_status()
            count = sessions * turns
            entries = sum(int(client.xlen(key)) for key in client.scan_iter(f"{DEFAULT_PREFIX}ev:*"))
            return (memory(client) - before) / count, entries / count
        finally:
            stop_process(server.process, server.log)
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="1x1x50,40x1x50,40x50x1,200x1x20")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        server = RedisServer(free_port(PORTS), folder)
        server.start()
        try:
            print("| answer | sessions x turns | bytes per finished turn | stream entries per turn |")
            print("|---|---|---|---|")
            for case in args.cases.split(","):
                pieces, sessions, turns = (int(part) for part in case.split("x"))
                per_turn, entries = run_case(folder, server.url, pieces, sessions, turns)
                answer = f"{pieces * len(PIECE)} chars in {pieces} pieces"
                print(f"| {answer} | {sessions} x {turns} | {per_turn:,.0f} | {entries:.1f} |")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
