"""Faults from outside (issue 11, class 9): the database file or the model fails for a while.

Nobody attacks here; the world does. Each fault is made for real from outside the server:
- the database made read-only for a moment (`chattr +i`, which holds for root too), while
  turns keep arriving: they may fail meanwhile (503 `storage_unavailable`), but once the
  file is writable again every turn must succeed, with no restart;
- the filesystem under the database filled to the last byte (a small tmpfs: `full_disk` is
  not in `ATTACKS` because the bench's server keeps its database on the machine's disk);
- the model hung (headers sent, then nothing): after timeouts in `PROVIDER_BREAKER_FAILURES`
  turns the provider's circuit opens and turns fail fast instead of waiting 2 x `LLM_TIMEOUT_S`.

Each scenario returns a typed report (the tests assert on it); `ATTACKS` wraps them into the
`Outcome` shape the bench prints.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests

from testing.attacks import Attack, Outcome, Target
from testing.disk_faults import database_files, filled, read_only
from testing.fake_llm import AnswerLog

DATABASE_ENV = {"RATE_LIMITS": "turns=off,sessions=off"}  # many turns at once; limits are another class
LLM_TIMEOUT_S = 1.0
HUNG_MODEL_S = 30.0  # the hung model drops a call after this: far past LLM_TIMEOUT_S, so who ended it tells
BREAKER_FAILURES = 2
BREAKER_COOLDOWN_S = 3.0
MODEL_ENV = {  # a server of its own: a 1 s deadline would fail the database faults' busy turns
    **DATABASE_ENV,
    "LLM_TIMEOUT_S": str(LLM_TIMEOUT_S),
    "PROVIDER_BREAKER_FAILURES": str(BREAKER_FAILURES),
    "PROVIDER_BREAKER_COOLDOWN_S": str(BREAKER_COOLDOWN_S),
}
DURING_TURNS = 24  # at once while the file is read-only: each runs on a thread that opens its connection now
AFTER_TURNS = 60


@dataclass(frozen=True)
class Turn:
    status: int
    code: str | None  # the error code, when it failed
    seconds: float
    body_bytes: int


@dataclass(frozen=True)
class DatabaseWindow:
    """Turns during a database fault and after it ended, and what `/health` said meanwhile."""

    during: list[Turn]
    after: list[Turn]
    health_during: tuple[int, dict[str, Any]]
    health_after: tuple[int, dict[str, Any]]

    @property
    def failed_after(self) -> int:
        return sum(turn.status != 200 for turn in self.after)

    def outcome(self) -> Outcome:
        statuses = Counter(turn.status for turn in self.during)
        state = self.health_during[1].get("database", {}).get("state", "?")
        last = self.after[-1]
        note = (
            f"during: {' '.join(f'{n}x{s}' for s, n in sorted(statuses.items()))}, /health "
            f"{self.health_during[0]} {state}; after: {self.failed_after}/{len(self.after)} failed"
        )
        return Outcome(status=last.status, body_bytes=last.body_bytes, note=note)


def chat_turn(target: Target, message: str, token: str | None = None) -> Turn:
    """One turn in a new session; its status, error code and wall time."""
    started = time.perf_counter()
    response = target.post("/chat", token=token, json={"message": message}, timeout=120)
    seconds = time.perf_counter() - started
    code = None
    if response.status_code != 200:
        try:
            code = response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = "not-json"
    return Turn(response.status_code, code, seconds, len(response.content))


def turns_at_once(target: Target, count: int, label: str) -> list[Turn]:
    with ThreadPoolExecutor(max_workers=min(count, 24)) as pool:
        return list(pool.map(lambda n: chat_turn(target, f"{label} {n}"), range(count)))


HEALTH_FRESH_S = 15.0  # far past HEALTH_CACHE_S: a probe made after the fault began must show by then


def health(target: Target) -> tuple[int, dict[str, Any]]:
    """`/health` as it stands once its database probe ran after this call began: it answers from
    probes cached for `HEALTH_CACHE_S`, so an answer probed before a fault may still be served."""
    since = datetime.now(UTC).isoformat(timespec="milliseconds")
    deadline = time.monotonic() + HEALTH_FRESH_S
    while True:
        response = requests.get(f"{target.server.base}/health", timeout=30)
        body = response.json()
        checked_at = str(body.get("database", {}).get("checked_at", since))
        if checked_at >= since or time.monotonic() > deadline:
            return response.status_code, body
        time.sleep(0.1)


def database_read_only_for_a_moment(target: Target) -> DatabaseWindow:
    """`chattr +i` on the database and its WAL files, turns meanwhile, then turns after."""
    database = Path(target.server.env["DATABASE_PATH"])
    with read_only(database_files(database)):
        health_during = health(target)
        during = turns_at_once(target, DURING_TURNS, "while read-only")
    return DatabaseWindow(during, turns_at_once(target, AFTER_TURNS, "after"), health_during, health(target))


def full_disk(target: Target) -> DatabaseWindow:
    """The database's filesystem filled to the last byte, turns of 30,000 characters meanwhile
    (more than the few MB of room the WAL file may still hold), then turns after.
    Needs the database on a small filesystem of its own (the tests mount a tmpfs)."""
    database = Path(target.server.env["DATABASE_PATH"])
    with filled(database.parent):
        health_during = health(target)
        during = turns_at_once(target, 4 * DURING_TURNS, "while full " + "x" * 30_000)
    return DatabaseWindow(during, turns_at_once(target, AFTER_TURNS, "after"), health_during, health(target))


@dataclass(frozen=True)
class HungModel:
    """Turns while the model hangs, `/health` once the circuit is open, and the first turn
    after the model came back and the cool-down passed. `provider_calls` counts the chat
    requests the model had received after each hung turn, and `hung_answers` says how each of
    them ended: the server hung up (its deadline) or the fake dropped it (`HUNG_MODEL_S` later)."""

    hung: list[Turn]
    health_open: dict[str, Any]
    recovered: Turn
    provider_calls: list[int]
    hung_answers: list[AnswerLog]

    def outcome(self) -> Outcome:
        last = self.hung[-1]
        times = ", ".join(f"{turn.seconds:.2f}" for turn in self.hung)
        return Outcome(
            status=last.status,
            body_bytes=last.body_bytes,
            note=f"{last.code}; turn seconds {times}; recovered {self.recovered.status}",
        )


def hung_model(target: Target, turns: int = 5) -> HungModel:
    target.llm.reset(hang_after_headers=True)
    hang_s, target.llm.hang_s = target.llm.hang_s, HUNG_MODEL_S
    try:
        hung: list[Turn] = []
        calls: list[int] = []
        for n in range(turns):
            hung.append(chat_turn(target, f"hung {n}"))
            calls.append(len(target.llm.requests))
        answers = [target.llm.answer(index, timeout=HUNG_MODEL_S + 5) for index in range(len(target.llm.answers))]
        health_open = health(target)[1]
    finally:
        target.llm.reset()
        target.llm.hang_s = hang_s
    time.sleep(BREAKER_COOLDOWN_S + 0.2)  # at least the cool-down: a busy machine only makes it longer
    return HungModel(hung, health_open, chat_turn(target, "back again"), calls, answers)


ATTACKS = [
    Attack(
        "faults: database read-only for a moment (turns meanwhile and after)",
        lambda target: database_read_only_for_a_moment(target).outcome(),
        deadline_s=30,
        env=DATABASE_ENV,
        unhealthy_ok=True,
    ),
    Attack(
        "faults: model hung (5 turns)",
        lambda target: hung_model(target).outcome(),
        deadline_s=4 * LLM_TIMEOUT_S + BREAKER_COOLDOWN_S,
        env=MODEL_ENV,
        unhealthy_ok=True,
    ),
]
