"""Attacks on the seams between features (issue 32): one user holding the turn workers, and a
flood of wrong passwords from many addresses. Each attack's outcome is what the OTHER user got:
how long their turn or their requests took while the attack ran (`bench/hostile.py` shows it
next to the server's memory and CPU; `tests/hostile/test_hostile_seams.py` asserts on it)."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

import requests

from testing.attacks import Attack, Outcome, Target
from testing.fake_llm import StreamReply

ENDLESS_TURNS = 4
FLOOD_ADDRESSES = 40
FLOOD_S = 3.0


def endless_answers(target: Target) -> Outcome:
    """The attacker keeps `ENDLESS_TURNS` answers streaming forever; the bystander says hello."""
    target.llm.when("tell me everything", StreamReply(pieces=("and so on ",), hang=True))
    sessions = [target.post("/sessions", json={}).json()["id"] for _ in range(ENDLESS_TURNS)]
    streams = [
        requests.post(
            f"{target.server.base}/chat",
            json={"message": "tell me everything", "session_id": session},
            headers={**target.headers(), "Accept": "text/event-stream"},
            stream=True,
            timeout=300,
        )
        for session in sessions
    ]
    try:
        time.sleep(1.0)  # the endless ones are running (or waiting for their share)
        began = time.monotonic()
        answer = target.post("/chat", target.bystander, json={"message": "hello"}, timeout=300)
        waited = time.monotonic() - began
    finally:
        for session in sessions:
            target.post(f"/sessions/{session}/cancel", json={})
        for stream in streams:
            stream.close()
    return Outcome(answer.status_code, len(answer.content), f"other's turn {waited:.2f} s")


class LoginFlood:
    """Wrong passwords for `name` from `addresses` client addresses (`X-Forwarded-For`, believed
    from a proxy of `TRUSTED_PROXIES`), one thread each, until the block ends; `statuses` holds
    every answer's status."""

    def __init__(self, base: str, name: str, addresses: int = FLOOD_ADDRESSES) -> None:
        self.base, self.name = base, name
        self.statuses: list[int] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._guess, args=(n,)) for n in range(addresses)]

    def _guess(self, n: int) -> None:
        attempt = 0
        while not self._stop.is_set():
            attempt += 1
            answer = requests.post(
                f"{self.base}/api/login",
                json={"name": self.name, "password": f"guess {n}-{attempt}"},
                headers={"X-Forwarded-For": f"10.2.{n // 200}.{n % 200 + 1}"},
                timeout=60,
            )
            self.statuses.append(answer.status_code)

    def __enter__(self) -> LoginFlood:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


def timed_requests(call: Callable[[], requests.Response], count: int | None = None, for_s: float = 0.0) -> list[float]:
    """Seconds each of `count` calls (or as many as fit in `for_s`) took; each must answer 200."""
    took: list[float] = []
    ends = time.monotonic() + for_s
    while (count is not None and len(took) < count) or (count is None and time.monotonic() < ends):
        began = time.monotonic()
        answer = call()
        took.append(time.monotonic() - began)
        if answer.status_code != 200:
            raise AssertionError(f"the bystander's request answered {answer.status_code}")
    return took


def owner_signs_in(base: str, name: str, password: str) -> requests.Response:
    """The account's owner, from an address that never failed."""
    return requests.post(
        f"{base}/api/login",
        json={"name": name, "password": password},
        headers={"X-Forwarded-For": "192.0.2.7"},
        timeout=60,
    )


def login_flood(target: Target) -> Outcome:
    """Wrong passwords from `FLOOD_ADDRESSES` addresses for `FLOOD_S`; meanwhile the bystander's
    token requests, then the account owner's right password from a fresh address."""
    base = target.server.base
    requests.post(
        f"{base}/api/admin/users",
        json={"name": "owner", "password": "the real password", "token": False},
        headers=target.server.auth(target.server.admin_token),
        timeout=60,
    )
    with LoginFlood(base, "owner"):
        took = timed_requests(lambda: target.get("/sessions", target.bystander), for_s=FLOOD_S)
        owner = owner_signs_in(base, "owner", "the real password")
    note = f"owner {owner.status_code}; other p50 {statistics.median(took) * 1000:.0f} max {max(took) * 1000:.0f} ms"
    return Outcome(owner.status_code, len(owner.content), note)


ATTACKS = [
    Attack(
        "turns: 4 endless answers of one user (TURN_WORKERS=4)",
        endless_answers,
        deadline_s=30.0,
        env={"TURN_WORKERS": "4", "LLM_IDLE_TIMEOUT_S": "600"},
    ),
    Attack(
        "login: wrong passwords from 40 addresses",
        login_flood,
        deadline_s=FLOOD_S + 2,
        memory_mb=2 * 64 + 12,  # many requests: two argon2 places of 64 MiB (storage/passwords.py), at most
        env={"TRUSTED_PROXIES": "127.0.0.1", "RATE_LIMITS": "turns=off,sessions=off,tools=off,login=10/minute"},
    ),
]
