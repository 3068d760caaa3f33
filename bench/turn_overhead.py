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

With `--against DIR` the server of another checkout (an older commit in a git worktree, run
by its own venv's Python) runs side by side on the same data and the same fake provider, and
its plain turns are interleaved with this one's: the difference is printed pair by pair,
which a noisy machine's drift cannot bias.

    .venv/bin/python bench/turn_overhead.py [--turns 300] [--messages 10000]
    git worktree add /tmp/old 2b9172b && python -m venv /tmp/old-venv && /tmp/old-venv/bin/pip install -r /tmp/old/requirements.txt
    .venv/bin/python bench/turn_overhead.py --against /tmp/old --against-python /tmp/old-venv/bin/python
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import percentile, start_server, stop_server, timed  # noqa: E402
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


class Server:
    """One server under test with its seeded session, and a client session of its own."""

    def __init__(self, root: Path, python: str, tmp: str, messages: int, llm: FakeLLMServer) -> None:
        database = Database(Path(tmp) / "bench.db")
        self.token, self.session_id = seed(database, messages)
        self.process, port = start_server(tmp, database.path, llm.openai_base_url, root=root, python=python)
        self.llm = llm
        self.base = f"http://127.0.0.1:{port}"
        self.http = requests.Session()
        self.headers = {"Authorization": f"Bearer {self.token}"}

    def chat(self, message: str) -> requests.Response:
        answer = self.http.post(
            f"{self.base}/chat",
            json={"message": message, "session_id": self.session_id},
            headers=self.headers,
            timeout=10,
        )
        answer.raise_for_status()
        return answer

    def floor(self) -> None:  # one round trip through the same server, no model, no turn
        self.http.get(f"{self.base}/api/me", headers=self.headers, timeout=10).raise_for_status()

    def plain(self) -> None:
        self.chat("hello")

    def memory(self, words: list[str]) -> None:
        self.llm.queue(f"/memory_search {' '.join(words)}", "Found it.")
        assert self.chat("what did I say?").json()["tool"]["ok"]


KINDS = ("plain", "memory", "memory_common")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument(
        "--against",
        type=Path,
        metavar="DIR",
        help="another checkout (e.g. `git worktree add /tmp/old <commit>`): its server runs side by side "
        "on the same data with the same turns, compared pair by pair",
    )
    parser.add_argument("--against-python", default=sys.executable, help="the Python of that checkout's venv")
    args = parser.parse_args()

    with ExitStack() as stack:
        llm = stack.enter_context(FakeLLMServer(default_reply="Sure, here you go."))
        servers = {
            "this": Server(ROOT, sys.executable, stack.enter_context(tempfile.TemporaryDirectory()), args.messages, llm)
        }
        stack.callback(stop_server, servers["this"].process)
        if args.against is not None:
            other_tmp = stack.enter_context(tempfile.TemporaryDirectory())
            servers["other"] = Server(args.against.resolve(), args.against_python, other_tmp, args.messages, llm)
            stack.callback(stop_server, servers["other"].process)
        servers["this"].plain()
        raw_body = llm.requests[-1]  # the exact body a plain turn sends: same size, same work
        raw_http = requests.Session()

        def raw() -> None:
            raw_http.post(f"{llm.openai_base_url}/chat/completions", json=raw_body, timeout=10).raise_for_status()

        def turns(server: Server) -> dict[str, Callable[[], None]]:
            content = random.sample(WORDS[COMMON_RANKS:], 2)  # as people search for
            common = random.sample(WORDS[:COMMON_RANKS], 2)  # worst case: the most frequent words
            return {
                "plain": server.plain,
                "memory": lambda: server.memory(content),
                "memory_common": lambda: server.memory(common),
            }

        for _ in range(20):  # warm-up: connections, caches
            raw()
            for server in servers.values():
                server.floor()
                for call in turns(server).values():
                    call()
        samples: dict[str, list[float]] = defaultdict(list)
        names = list(servers)
        for turn in range(args.turns):  # interleaved, so drift hits all alike
            samples["raw"] += timed(raw, 1)
            samples["floor"] += timed(servers["this"].floor, 1)
            state = random.getstate()
            for name in names if turn % 2 == 0 else names[::-1]:  # which server goes first alternates
                random.setstate(state)  # both servers search the same words
                for kind, call in turns(servers[name]).items():
                    samples[f"{kind}/{name}"] += timed(call, 1)

    report(args, samples)


def report(args: argparse.Namespace, samples: dict[str, list[float]]) -> None:
    raw_ms = samples["raw"]
    print(f"turn overhead on loopback: {args.turns} samples each, session of {args.messages} messages\n")
    print(f"{'':40}{'p50 ms':>10}{'p95 ms':>10}")
    print(
        f"{'server round trip (/api/me)':40}"
        f"{percentile(samples['floor'], 0.5):10.2f}{percentile(samples['floor'], 0.95):10.2f}"
    )
    labels = {
        "plain": ("plain turn (1 call)", 1),
        "memory": ("memory_search turn (2 calls)", 2),
        "memory_common": ("  same, most common words", 2),
    }
    rows = [("raw provider call", raw_ms, 1)]
    for name in ("this", "other"):
        suffix = "" if name == "this" else f", {args.against.name}"
        rows += [
            (labels[kind][0] + suffix, samples[f"{kind}/{name}"], labels[kind][1])
            for kind in KINDS
            if f"{kind}/{name}" in samples
        ]
    for label, values, _ in rows:
        print(f"{label:40}{percentile(values, 0.5):10.2f}{percentile(values, 0.95):10.2f}")
    print()
    for label, values, calls in rows[1:]:
        for name, q in (("p50", 0.5), ("p95", 0.95)):
            base_ms = calls * percentile(raw_ms, q)
            added = percentile(values, q) - base_ms
            print(f"{label:40} added {name}: {added:6.2f} ms   ratio turn/raw: {percentile(values, q) / base_ms:5.2f}x")
    print(f"\nmean raw call {statistics.mean(raw_ms):.2f} ms")
    if args.against is not None:
        print(f"\nthis checkout minus {args.against.name}, turn by turn:")
        for kind in KINDS:
            paired = [
                mine - theirs for mine, theirs in zip(samples[f"{kind}/this"], samples[f"{kind}/other"], strict=True)
            ]
            print(
                f"  {labels[kind][0].strip():32} p50 {percentile(paired, 0.5):+6.2f} ms   mean {statistics.mean(paired):+6.2f} ms"
            )


if __name__ == "__main__":
    main()
