"""Input caps against the real server: each attack of `testing/attacks/input.py` (issue 11,
classes 4 and 7).

A model's 2 MB line and a tool's 6 MB output are stored capped (SPEC 12) and replayed capped;
a body nested 100,000 levels deep on every JSON endpoint and a lone surrogate in a `/run` file
answer a clear 400, and a 40 MB body to an endpoint that takes a short name a 413 before it is
read. Meanwhile the server's process tree grows by less than 100 MB and spends at
most the attack's deadline + 2 s of CPU, and another user keeps being served.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path

import pytest

from pipeline.reply_cap import ANSWER_CUT_NOTE, MAX_ANSWER_CHARS
from testing.attacks import Attack, Target, hostile_target
from testing.attacks.input import ATTACKS
from testing.hostile import Bystander, PeakMemory
from tools.result_caps import MAX_CONTRACT_BYTES, MAX_OUTPUT_BYTES

pytestmark = pytest.mark.slow

BY_NAME = {attack.name: attack for attack in ATTACKS}
ANSWER_STORED = MAX_ANSWER_CHARS + len(ANSWER_CUT_NOTE) + 200  # an assistant row: content, meta
TOOL_STORED = MAX_CONTRACT_BYTES + MAX_OUTPUT_BYTES + 2_000  # a tool row: contract, meta around the output
ANSWER_BYTES = 2 * ANSWER_STORED + 8_000  # the turn's JSON holds the answer twice (reply, messages)
# status of the attacker's (last) request, its note, and the largest stored message it may leave
EXPECTED: dict[str, tuple[int, str | None, int]] = {
    "model: 2 MB first command line, replayed": (200, None, ANSWER_STORED),
    "tool: 6 MB memory_sql output stored": (200, None, TOOL_STORED),
    "body: JSON nested 100,000 deep, every endpoint": (400, "invalid_json", 0),
    "body: 40 MB JSON string to POST /sessions": (413, "payload_too_large", 0),
    "body: lone surrogate in a /run file": (400, "invalid_json", 0),
}


class Targets:
    """One real server per distinct `Attack.env`, started on first use, stopped with the module."""

    def __init__(self, root: Path, stack: ExitStack) -> None:
        self.root, self.stack = root, stack
        self.by_env: dict[tuple[tuple[str, str], ...], Target] = {}

    def for_env(self, env: Mapping[str, str]) -> Target:
        key = tuple(sorted(env.items()))
        if key not in self.by_env:
            folder = self.root / f"server{len(self.by_env)}"
            self.by_env[key] = self.stack.enter_context(hostile_target(folder, dict(env)))
        return self.by_env[key]


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Targets]:
    with ExitStack() as stack:
        yield Targets(Path(tmp_path_factory.mktemp("input")), stack)


def test_every_attack_has_an_expectation() -> None:
    assert set(EXPECTED) == set(BY_NAME)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_attack_is_bounded_and_others_keep_working(targets: Targets, name: str) -> None:
    attack: Attack = BY_NAME[name]
    target = targets.for_env(attack.env)

    def bystander_request():  # type: ignore[no-untyped-def]
        return target.get("/sessions", token=target.bystander, timeout=10)

    cpu_before = target.server.cpu_s()
    with PeakMemory(target.server) as memory, Bystander(target.server, request=bystander_request) as bystander:
        outcome = attack.run(target)
    cpu = target.server.cpu_s() - cpu_before

    status, note, stored_cap = EXPECTED[name]
    assert outcome.status == status, outcome
    assert note is None or outcome.note == note, outcome
    assert outcome.body_bytes < ANSWER_BYTES, outcome
    assert outcome.stored_bytes <= stored_cap, outcome
    assert memory.added_mb < 100, f"{name}: +{memory.added_mb:.0f} MB"
    assert cpu < attack.deadline_s + 2, f"{name}: {cpu:.1f} s of CPU"
    assert not bystander.failures, bystander.failures[:3]
    assert bystander.latencies_ms, "the bystander was never answered"


def test_the_capped_answer_is_what_later_contexts_replay(targets: Targets) -> None:
    """After the 2 MB line, the next turn's whole request to the model stays near the cap."""
    target = targets.for_env({})
    outcome = BY_NAME["model: 2 MB first command line, replayed"].run(target)
    assert outcome.status == 200
    replayed = json.dumps(target.llm.requests[-1])
    assert len(replayed) < MAX_ANSWER_CHARS + 20_000
    assert ANSWER_CUT_NOTE.strip() in json.loads(replayed)["messages"][-2]["content"]
