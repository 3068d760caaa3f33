"""Short full garbage collections while thousands of streams are open.

A full (generation 2) collection walks every object the collector tracks, with every thread
stopped. With thousands of open event streams that is about a million objects, and the pauses
they cause slow every concurrent turn (`bench/streams.py`; figures in `bench/README.md`).

What survives a full collection is mostly long-lived (the app, open streams and their
connections), so after each one the survivors are moved to the permanent generation
(`gc.freeze()`), which later collections skip: the next full collections walk only what is
newer. Reference counting still frees a frozen object the moment it is no longer used; only
a cycle among frozen objects waits. So every `thaw_every_s` the permanent generation is
given back (`gc.unfreeze()`) and the next full collection walks everything and frees such
cycles: one long pause every ten minutes instead of one every few seconds, and cyclic
garbage of closed streams kept ten minutes at most.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

THAW_EVERY_S = 600.0


class FreezeAfterFullCollections:
    """A `gc.callbacks` entry; `install()` adds it, `uninstall()` takes it away."""

    def __init__(self, thaw_every_s: float = THAW_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.thaw_every_s = thaw_every_s
        self._clock = clock
        self._thawed_at = clock()
        self.frozen_runs = 0  # full collections whose survivors were frozen
        self.thaws = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info.get("generation") != 2:
            return
        now = self._clock()
        if now - self._thawed_at >= self.thaw_every_s:
            gc.unfreeze()  # the next full collection walks every object again
            self._thawed_at = now
            self.thaws += 1
        else:
            gc.freeze()
            self.frozen_runs += 1

    def install(self) -> None:
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
