"""Event ids that only ever grow, within a process and across restarts (SPEC section 7).

An id is a number of microseconds since the epoch, bumped by one where two events fall in
the same microsecond: readable, sortable, and after a restart the clock has moved on, so a
client holding a `Last-Event-ID` from before the restart cannot mistake a new event for
one it has seen. The clock alone is not trusted to never step back (NTP, a VM restored
from a snapshot): the allocator also keeps a reservation on disk, always ahead of every id
handed out, and starts above it. The file is written about once a minute while events
flow, never per event.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("events")

RESERVE_US = 60_000_000  # each reservation covers a minute of clock-driven ids


def now_us() -> int:
    return time.time_ns() // 1000


class IdClock:
    """Thread-safe allocator of strictly increasing ids; `path=None` keeps nothing on disk.
    `clock` (microseconds) is the wall clock; a test passes one that steps back."""

    def __init__(self, path: str | Path | None = None, clock: Callable[[], int] = now_us) -> None:
        self._path = Path(path) if path else None
        self._clock = clock
        self._lock = threading.Lock()
        self._reserved = self._load()
        self._last = max(self._reserved, clock() - 1)
        self.first = self._last + 1  # ids below this one were issued by an earlier process, if at all

    def _load(self) -> int:
        if self._path is None:
            return 0
        try:
            return int(self._path.read_text(encoding="ascii").strip() or 0)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError):
            log.warning("event id reservation %s unreadable; ids start from the clock", self._path)
            return 0

    def _save(self, reserved: int) -> None:
        if self._path is None:
            return
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self._path.with_suffix(".tmp")
            temporary.write_text(str(reserved), encoding="ascii")
            os.chmod(temporary, 0o600)
            os.replace(temporary, self._path)
        except OSError as error:  # a full or read-only disk must not stop events
            log.warning("cannot save the event id reservation (%s); ids stay clock-based", error)

    def next(self) -> int:
        with self._lock:
            issued = max(self._last + 1, self._clock())
            self._last = issued
            if issued >= self._reserved:
                self._reserved = issued + RESERVE_US
                self._save(self._reserved)
            return issued

    @property
    def last(self) -> int:
        with self._lock:
            return self._last
