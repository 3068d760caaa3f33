"""How much time does the orchestrator add on top of the model? (issue: core, Speed)

In one run, on loopback:
  raw      N direct provider calls to a fake OpenAI-compatible server that answers at once,
           each sending the exact request body the product sends for a plain turn
  plain    N plain turns through POST /chat (1 provider call each)
  memory   N `/memory_search` turns (2 provider calls each) on a session of 10,000 messages,
           searching two content words; and again with two of the 10 most frequent words
           (each in a large share of all messages: the worst case for bm25 ranking)
Messages are 8-40 words drawn from a 5,000-word vocabulary with Zipf frequencies (s=1.07),
like natural text.
The added overhead of a turn is its latency minus the raw latency of the provider calls it
makes (1 for plain, 2 for memory), compared at the same percentile. A `GET /api/me` round
trip through the same server is printed too: the part of the overhead that is the HTTP hop
to the orchestrator itself, not the turn. The server is the real
product (`python app.py`, uvicorn) in a subprocess with its own temporary database.

    .venv/bin/python bench/turn_overhead.py [--turns 300] [--messages 10000]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import NO_USER_LIMITS, free_port, percentile, timed  # noqa: E402
from storage.db import Database, transaction, utc_now  # noqa: E402
from storage.sessions import create_session  # noqa: E402
from storage.users import create_user  # noqa: E402
from testing.fake_llm import FakeLLMServer  # noqa: E402

VOCABULARY_SIZE = 5000
COMMON_RANKS = 10  # the most frequent words: each is in a large share of all messages


def vocabulary(rng: random.Random) -> list[str]:
    """Pseudo-words, most frequent first (rank order is what Zipf sampling uses)."""
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "te", "vo", "zi", "pa", "do", "gu", "be", "fi", "ha"]
    words: list[str] = []
    while len(words) < VOCABULARY_SIZE:
        word = "".join(rng.choice(syllables) for _ in range(rng.randint(2, 4)))
        if word not in words:
            words.append(word)
    return words


WORDS = vocabulary(random.Random(11))
ZIPF_WEIGHTS = [1 / (rank + 1) ** 1.07 for rank in range(VOCABULARY_SIZE)]


def seed(database: Database, messages: int) -> tuple[str, str]:
    """A user with one session holding `messages` messages; returns (token, session_id)."""
    rng = random.Random(7)
    database.migrate()
    with database.connection() as conn:
        user, token = create_user(conn, "bench")
        session = create_session(conn, user.id, "bench")
        now = utc_now()
        rows = [
            (
                session.id,
                user.id,
                "user" if i % 2 == 0 else "assistant",
                " ".join(rng.choices(WORDS, ZIPF_WEIGHTS, k=rng.randint(8, 40))),
                now,
            )
            for i in range(messages)
        ]
        with transaction(conn):
            conn.executemany(
                "INSERT INTO chat_messages(session_id, user_id, role, content, created_at) VALUES (?, ?, ?, ?, ?)", rows
            )
    return token, session.id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--messages", type=int, default=10_000)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(default_reply="Sure, here you go.") as llm:
        database = Database(Path(tmp) / "bench.db")
        token, session_id = seed(database, args.messages)
        port = free_port()
        env = {
            **os.environ,
            "PORT": str(port),
            "DATABASE_PATH": database.path,
            "DATA_DIR": tmp,
            "AUTH_TOKEN_FILE": str(Path(tmp) / "admin.token"),
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": llm.openai_base_url,
            "LLM_MODEL": "bench",
            "JUDGE_ENABLED": "0",
            **NO_USER_LIMITS,
        }
        server = subprocess.Popen(
            [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            base = f"http://127.0.0.1:{port}"
            http = requests.Session()
            deadline = time.monotonic() + 30
            while True:
                try:
                    if http.get(f"{base}/health", timeout=1).ok:
                        break
                except requests.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit("server did not start")
                time.sleep(0.1)
            headers = {"Authorization": f"Bearer {token}"}
            http.post(f"{base}/chat", json={"message": "hello", "session_id": session_id}, headers=headers, timeout=10)
            raw_body = llm.requests[-1]  # the exact body a plain turn sends: same size, same work

            def floor() -> None:  # one round trip through the same server, no model, no turn
                http.get(f"{base}/api/me", headers=headers, timeout=10).raise_for_status()

            def raw() -> None:
                http.post(f"{llm.openai_base_url}/chat/completions", json=raw_body, timeout=10).raise_for_status()

            def plain() -> None:
                r = http.post(
                    f"{base}/chat", json={"message": "hello", "session_id": session_id}, headers=headers, timeout=10
                )
                r.raise_for_status()

            def memory_turn(words: list[str]) -> None:
                llm.queue(f"/memory_search {' '.join(words)}", "Found it.")
                r = http.post(
                    f"{base}/chat",
                    json={"message": "what did I say?", "session_id": session_id},
                    headers=headers,
                    timeout=10,
                )
                r.raise_for_status()
                assert r.json()["tool"]["ok"], r.json()

            def memory() -> None:  # content words, as people search for
                memory_turn(random.sample(WORDS[COMMON_RANKS:], 2))

            def memory_common() -> None:  # worst case: the most frequent words
                memory_turn(random.sample(WORDS[:COMMON_RANKS], 2))

            for call in (floor, raw, plain, memory, memory_common):  # warm-up: connections, caches
                timed(call, 20)
            floor_ms, raw_ms, plain_ms, memory_ms, common_ms = [], [], [], [], []
            for _ in range(args.turns):  # interleaved, so drift hits all alike
                floor_ms += timed(floor, 1)
                raw_ms += timed(raw, 1)
                plain_ms += timed(plain, 1)
                memory_ms += timed(memory, 1)
                common_ms += timed(memory_common, 1)
        finally:
            server.terminate()
            server.wait(timeout=30)

    print(f"turn overhead on loopback: {args.turns} samples each, session of {args.messages} messages\n")
    print(f"{'':30}{'p50 ms':>10}{'p95 ms':>10}")
    print(f"{'server round trip (/api/me)':30}{percentile(floor_ms, 0.5):10.2f}{percentile(floor_ms, 0.95):10.2f}")
    rows = [
        ("raw provider call", raw_ms, 1),
        ("plain turn (1 call)", plain_ms, 1),
        ("memory_search turn (2 calls)", memory_ms, 2),
        ("  same, most common words", common_ms, 2),
    ]
    for name, samples, _ in rows:
        print(f"{name:30}{percentile(samples, 0.5):10.2f}{percentile(samples, 0.95):10.2f}")
    print()
    for name, samples, calls in rows[1:]:
        for label, q in (("p50", 0.5), ("p95", 0.95)):
            base_ms = calls * percentile(raw_ms, q)
            added = percentile(samples, q) - base_ms
            print(
                f"{name:30} added {label}: {added:6.2f} ms   ratio turn/raw: {percentile(samples, q) / base_ms:5.2f}x"
            )
    print(f"\nmean raw call {statistics.mean(raw_ms):.2f} ms")


if __name__ == "__main__":
    main()
