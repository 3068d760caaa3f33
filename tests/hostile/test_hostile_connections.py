"""The HTTP layer under attack, before any login: a request head has a size cap.

Without it, one connection sending headers for the length of its receive deadline made the
server hold hundreds of megabytes (httptools keeps every header of an unfinished head).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from testing.attacks import Target, hostile_target
from testing.attacks.connections import ATTACKS, FLOOD_BYTES
from testing.hostile import Bystander, PeakMemory

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    with hostile_target(tmp_path_factory.mktemp("hostile-http")) as running:
        yield running


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda attack: attack.name)
def test_an_endless_request_head_is_cut_early_and_costs_no_memory(target: Target, attack):
    cpu_before = target.server.cpu_s()
    with PeakMemory(target.server) as memory, Bystander(target.server) as bystander:
        outcome = attack.run(target)
    assert outcome.status in (431, 0), outcome  # 0: the close reset the socket before the 431 was read
    sent_mb = float(outcome.note.split()[1])
    # The server reads 64 KiB (+ one read) of head; what the client got to send beyond that sat
    # in the two kernels' socket buffers (several MB on loopback) when the close came.
    assert sent_mb < 16 < FLOOD_BYTES / 1e6, f"{sent_mb} MB were sent before the server closed"
    assert memory.added_mb < 20, memory
    assert target.server.cpu_s() - cpu_before < attack.deadline_s + 2
    assert bystander.failures == [] and bystander.latencies_ms


def test_heads_within_the_caps_are_served_and_those_past_them_get_431(target: Target):
    base = target.server.base
    assert requests.get(f"{base}/health", headers={f"X-{i}": "a" * 100 for i in range(120)}, timeout=10).ok
    assert requests.get(f"{base}/health", headers={"X-big": "a" * 60_000}, timeout=10).ok
    too_many = requests.get(f"{base}/health", headers={f"X-{i}": "a" for i in range(129)}, timeout=10)
    assert too_many.status_code == 431
    assert too_many.json() == {"error": {"code": "headers_too_large", "message": "more than 128 header fields"}}
    assert too_many.headers["X-Content-Type-Options"] == "nosniff"
    too_big = requests.get(f"{base}/health", headers={"X-big": "a" * 70_000}, timeout=10)
    assert too_big.status_code == 431 and "larger than 65536 bytes" in too_big.json()["error"]["message"]
    body = requests.post(f"{base}/chat", data=b"x" * 500_000, headers=target.headers(), timeout=10)
    assert body.status_code == 400  # a big body is not a big head: it reaches the app (not JSON)


def test_a_large_body_is_not_counted_as_head(target: Target):
    """A body of any size (within MAX_REQUEST_BYTES) reaches the app: one sent in a single
    write, one whose head and first body bytes share a read, and one after a kept-alive request."""
    session = requests.Session()
    for size in (300_000, 65_000, 900_000):
        answer = session.post(
            f"{target.server.base}/chat",
            data=b'{"message": "' + b"x" * size + b'"}',
            headers={**target.headers(), "Content-Type": "application/json"},
            timeout=30,
        )
        assert answer.status_code != 431, answer.text
        assert answer.status_code in (200, 400, 413), answer.text
