"""`serving/gc_policy.py`: survivors of a full collection are frozen; every `thaw_every_s`
they are given back so that a full collection can free cycles among them."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from serving.gc_policy import FreezeAfterFullCollections


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def policy() -> Iterator[tuple[FreezeAfterFullCollections, Clock]]:
    clock = Clock()
    installed = FreezeAfterFullCollections(thaw_every_s=600, clock=clock)
    installed.install()
    try:
        yield installed, clock
    finally:
        installed.uninstall()
        gc.unfreeze()  # this test process's objects go back where they were


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_a_full_collection_freezes_its_survivors_and_later_ones_skip_them(policy) -> None:
    installed, _ = policy
    gc.collect()
    assert installed.frozen_runs == 1 and gc.get_freeze_count() > 0
    kept = [Cycle() for _ in range(100)]
    assert all(gc.is_tracked(cycle) for cycle in kept)
    gc.collect()
    # the new survivors joined the frozen ones: no generation the collector walks holds them
    # (a count of frozen objects is no proof: an earlier frozen object may be freed meanwhile)
    walked = {id(item) for item in gc.get_objects()}
    assert not any(id(cycle) in walked for cycle in kept)
    assert installed.frozen_runs == 2


def test_generation_0_and_1_collections_freeze_nothing(policy) -> None:
    installed, _ = policy
    gc.collect(0)
    gc.collect(1)
    assert installed.frozen_runs == 0 and installed.thaws == 0


def test_frozen_cycles_are_freed_after_the_thaw(policy) -> None:
    installed, clock = policy
    garbage = Cycle()
    gc.collect()  # `garbage` is alive: frozen with the rest
    assert installed.frozen_runs == 1
    ref = weakref.ref(garbage)
    del garbage
    gc.collect()  # a frozen cycle is not examined: still there
    assert ref() is not None
    clock.now += 600
    gc.collect()  # the thaw: the permanent generation is given back...
    assert installed.thaws == 1 and gc.get_freeze_count() == 0
    gc.collect()  # ...and the next full collection frees the cycle
    assert ref() is None
    assert installed.frozen_runs == 3  # and freezes again
