"""Per-user limits (issue 11, class 5): one ordinary account floods an endpoint.

Each attack sends far more than `RATE_LIMITS` (or `MAX_STREAMS_PER_USER`) allows, from the
attacker's account, and reports how many requests were served and how many refused with 429.
The settings are written out in `ENV` (the defaults, plus TRACE_ENABLED for never-ending
streams), so these attacks get a server of their own in `bench/hostile.py`: exhausting the
attacker's budget here must not starve the other areas' attacks.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import requests

from testing.attacks import Attack, Outcome, Target

RATE_LIMITS = "turns=30/minute,runs=60/minute,generate=5/hour,login=10/minute,sessions=60/hour,tools=60/minute"
MAX_STREAMS = 8
ENV = {"RATE_LIMITS": RATE_LIMITS, "MAX_STREAMS_PER_USER": str(MAX_STREAMS), "TRACE_ENABLED": "1"}


def _tally(responses: list[requests.Response], what: str) -> Outcome:
    """The last answer (a refusal, when the limit holds) and how many of each status."""
    counts = Counter(response.status_code for response in responses)
    last = next((r for r in reversed(responses) if r.status_code == 429), responses[-1])
    note = f"{what}: " + " ".join(f"{n}x{status}" for status, n in sorted(counts.items()))
    return Outcome(status=last.status_code, body_bytes=len(last.content), note=note)


def _burst(count: int, send: Callable[[int], requests.Response], threads: int = 8) -> list[requests.Response]:
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(send, range(count)))


def burst_of_turns(target: Target) -> Outcome:
    """100 chat turns over 10 sessions, 10 at a time (one turn at a time per session)."""
    sessions = [target.post("/sessions", json={}).json().get("id") for _ in range(10)]

    def send(number: int) -> requests.Response:
        return target.post("/chat", json={"message": f"turn {number}", "session_id": sessions[number % 10]})

    return _tally(_burst(100, send, threads=10), "100 turns")


def burst_of_runs(target: Target) -> Outcome:
    """200 judge runs (with the judge off each costs little, but the count is what is limited)."""
    body = {"language": "python", "files": {"main.py": "print(1)"}}
    return _tally(_burst(200, lambda _: target.post("/run", json=body)), "200 runs")


def burst_of_direct_tool_calls(target: Target) -> Outcome:
    """200 direct `/memory_sql` calls: every direct tool call spends a budget (`tools`), even a cheap one."""
    body = {"sql": "SELECT count(*) FROM memories"}
    return _tally(_burst(200, lambda _: target.post("/tools/memory_sql", json=body)), "200 direct tool calls")


def burst_of_generations(target: Target) -> Outcome:
    body = {"topic": "loops", "language": "python", "count": 10}
    return _tally(_burst(30, lambda _: target.post("/activities/generate", json=body)), "30 generations")


def burst_of_failed_logins(target: Target) -> Outcome:
    """200 wrong tokens from one address, then the bystander logs in from the same address:
    someone else's failures never lock out a valid token."""
    responses = _burst(
        200, lambda n: requests.post(f"{target.server.base}/api/login", json={"token": f"oct_guess{n}"}, timeout=30)
    )
    victim = requests.post(f"{target.server.base}/api/login", json={"token": target.bystander}, timeout=30)
    outcome = _tally(responses, "200 bad logins")
    return Outcome(outcome.status, outcome.body_bytes, f"{outcome.note}; victim {victim.status_code}")


def many_sessions(target: Target) -> Outcome:
    return _tally(_burst(500, lambda _: target.post("/sessions", json={})), "500 sessions")


def _open_stream(target: Target, path: str) -> tuple[socket.socket, int]:
    """A raw event-stream request held open; returns the socket and the answer's status."""
    sock = socket.create_connection(("127.0.0.1", target.server.port), timeout=30)
    sock.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {target.attacker}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            break
        head += chunk
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return sock, status


def hundred_streams(target: Target) -> Outcome:
    """100 never-ending trace streams from one user, all held open at once."""
    session_id = target.post("/sessions", json={}).json().get("id")
    held = [_open_stream(target, f"/sessions/{session_id}/trace") for _ in range(100)]
    statuses = Counter(status for _, status in held)
    for sock, _ in held:
        sock.close()
    note = "100 streams: " + " ".join(f"{n}x{status}" for status, n in sorted(statuses.items()))
    return Outcome(status=429 if statuses[429] else 200, body_bytes=0, note=note)


ATTACKS: list[Attack] = [
    Attack("limits: 100 event streams from one user", hundred_streams, deadline_s=5, env=ENV),
    Attack("limits: a burst of 100 turns", burst_of_turns, deadline_s=10, env=ENV),
    Attack("limits: a burst of 200 judge runs", burst_of_runs, deadline_s=5, env=ENV),
    Attack("limits: a burst of 200 direct tool calls", burst_of_direct_tool_calls, deadline_s=10, env=ENV),
    Attack("limits: 30 problem generations", burst_of_generations, deadline_s=5, env=ENV),
    Attack("limits: 200 failed logins from one address", burst_of_failed_logins, deadline_s=5, env=ENV),
    Attack("limits: 500 new sessions", many_sessions, deadline_s=5, env=ENV),
]
