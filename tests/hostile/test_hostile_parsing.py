"""Untrusted parsing against the real server: each attack of `testing/attacks/parsing.py`
(regex bombs in `/search_files`, hostile pages in `/open_url`, an image bomb upload).

The attacker gets a clear error (4xx, or a tool `Error:` result in a chat turn) or a capped
answer; the server's process tree grows by less than 100 MB and spends at most the attack's
deadline + 2 s of CPU; another user keeps being served meanwhile; what the turn stored is
capped (SPEC 12: 64 KiB of contract text, 256 KiB of structured output).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.attacks import Attack, Target, hostile_target
from testing.attacks.parsing import ATTACKS
from testing.hostile import Bystander, PeakMemory

pytestmark = pytest.mark.slow

BY_NAME = {attack.name: attack for attack in ATTACKS}
STORED_CAP = 64 * 1024 + 256 * 1024  # contract text plus structured meta (SPEC 12)
ANSWER_CAP = 400 * 1024  # the attacker's HTTP answer (a chat turn's messages included)
# what each attack may end as: the status of the attacker's request and the tool's code
EXPECTED: dict[str, tuple[set[int], set[str]]] = {
    "search_files: nested counted repetition (compile-time bomb)": ({400}, {"VALIDATION_FAILED"}),
    "search_files: backtracking regex over 1 MB of files": ({504}, {"TIMEOUT"}),
    "open_url: 2 MB page of tiny tags, through chat": ({200}, {"ok", "UPSTREAM_ERROR"}),
    "open_url: 400,000 nested tags, through chat": ({200}, {"ok", "UPSTREAM_ERROR", "NOT_FOUND"}),
    "open_url: a 1.9 MB <title>, through chat": ({200}, {"ok"}),
    "open_url: 60,000 links, through chat": ({200}, {"ok", "UPSTREAM_ERROR"}),
    # the server never inflates it (headers only) and 36 Mpx is within MAX_IMAGE_PIXELS: stored
    "upload: PNG decompression bomb (6000 x 6000)": ({200}, {"ok"}),
    "upload: animated WebP of 500 frames of 2000 x 2000": ({400}, {"invalid_image"}),
}


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with hostile_target(Path(tmp_path_factory.mktemp("parsing"))) as found:
        yield found


def test_every_attack_has_an_expectation() -> None:
    assert set(EXPECTED) == set(BY_NAME)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_attack_is_bounded_and_others_keep_working(target: Target, name: str) -> None:
    attack: Attack = BY_NAME[name]

    def bystander_request():  # type: ignore[no-untyped-def]
        return target.get("/sessions", token=target.bystander, timeout=10)

    cpu_before = target.server.cpu_s()
    with PeakMemory(target.server) as memory, Bystander(target.server, request=bystander_request) as bystander:
        outcome = attack.run(target)
    cpu = target.server.cpu_s() - cpu_before

    statuses, codes = EXPECTED[name]
    assert outcome.status in statuses and outcome.note in codes, outcome
    assert outcome.body_bytes < ANSWER_CAP, outcome
    assert outcome.stored_bytes < STORED_CAP, outcome
    assert memory.added_mb < 100, f"{name}: +{memory.added_mb:.0f} MB"
    assert cpu < attack.deadline_s + 2, f"{name}: {cpu:.1f} s of CPU"
    assert not bystander.failures, bystander.failures[:3]
    assert bystander.latencies_ms, "the bystander was never answered"
