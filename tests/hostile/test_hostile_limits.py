"""Per-user limits against the real server: each attack of `testing/attacks/limits.py` floods
one endpoint from one account. The attacker gets 429 `rate_limited` with `Retry-After` once
past its budget, the server's memory and CPU stay bounded, and another user (the bystander)
keeps being served meanwhile, never refused with 429.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testing.attacks import Attack, Target, hostile_target
from testing.attacks.limits import ATTACKS, ENV, MAX_STREAMS
from testing.hostile import Bystander, PeakMemory

pytestmark = pytest.mark.slow

BY_NAME = {attack.name: attack for attack in ATTACKS}
# the most each attack may get served (its budget); the rest must be refused
SERVED = {
    "limits: 100 event streams from one user": MAX_STREAMS,
    "limits: a burst of 100 turns": 30,
    "limits: a burst of 200 judge runs": 60,
    "limits: a burst of 200 direct tool calls": 60,
    "limits: 30 problem generations": 5,
    "limits: 200 failed logins from one address": 10,
    "limits: 500 new sessions": 60,
}


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with hostile_target(Path(tmp_path_factory.mktemp("limits")), ENV) as found:
        yield found


def served(note: str) -> int:
    """Requests not refused with 429, from a note like `100 turns: 30x200 70x429`."""
    return sum(int(n) for n, status in re.findall(r"(\d+)x(\d+)", note) if status != "429")


@pytest.mark.parametrize("name", list(BY_NAME))
def test_attack_is_refused_past_its_budget_and_others_keep_working(target: Target, name: str):
    attack: Attack = BY_NAME[name]
    statuses: list[int] = []

    def bystander_request() -> requests.Response:
        response = target.get("/sessions", token=target.bystander, timeout=10)
        statuses.append(response.status_code)
        return response

    cpu_before = target.server.cpu_s()
    with PeakMemory(target.server) as memory, Bystander(target.server, request=bystander_request) as bystander:
        outcome = attack.run(target)
    cpu = target.server.cpu_s() - cpu_before

    assert outcome.status == 429, outcome.note
    assert served(outcome.note.split(";")[0]) <= SERVED[name], outcome.note
    assert outcome.body_bytes < 1000
    assert memory.added_mb < 100, f"{memory.added_mb:.1f} MB"
    assert cpu < attack.deadline_s + 2, f"{cpu:.2f} s of CPU"
    assert bystander.failures == [] and statuses and set(statuses) == {200}, (bystander.failures, set(statuses))
    if "logins" in name:
        assert outcome.note.endswith("victim 200"), outcome.note  # a valid token is never locked out
    # the bystander's own turn goes through right after the attack
    answer = target.post("/chat", token=target.bystander, json={"message": "still there?"}, timeout=30)
    assert answer.status_code == 200, answer.text


def test_a_refusal_says_why_and_when_to_retry(target: Target):
    """Past the sessions budget (spent by the attack above, or now), the answer is SPEC 4's."""
    for _ in range(SERVED["limits: 500 new sessions"] + 1):
        refused = target.post("/sessions", json={})
        if refused.status_code == 429:
            break
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and "sessions" in error["message"]
    assert error["details"]["limit"] == "sessions"
