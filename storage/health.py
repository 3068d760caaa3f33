"""Can the database take a write right now? What `/health` reports about it.

A `SELECT 1` answers while nothing can be written (a read-only file, a full disk), and so
does a thread's kept connection, whose descriptor was opened before the fault and may still
write. So the probe opens a new connection, as the next request's thread would, and writes
for real: it takes the write lock with a short wait (`BEGIN IMMEDIATE`), creates a table and
rolls back. That fails with SQLITE_READONLY when a new connection could not write, and with
SQLITE_BUSY when another writer holds the lock past `PROBE_BUSY_MS` (SPEC 12 allows 100 ms).
Nothing reaches the disk, so a full disk is read from the filesystem itself: less than
`MIN_FREE_BYTES` available to this process (SQLite grows the file and its WAL a page at a
time, and one large turn can need that much) counts as full.

On PostgreSQL (`DATABASE_URL=postgresql://…`) the same probe runs on a new server connection
(PostgreSQL's DDL is transactional, so the table never exists for anyone else): a server that
is down or unreachable is "unavailable", a read-only one (a standby) "read_only", a lock held
past the wait "locked"; there is no local file, so no free bytes to report.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from storage.connection import Store
from storage.errors import StorageError, StorageFull, StorageLocked, StorageReadOnly

PROBE_BUSY_MS = 200
MIN_FREE_BYTES = 1024 * 1024

State = Literal["ok", "read_only", "full", "locked", "unavailable"]


@dataclass(frozen=True)
class DatabaseHealth:
    """`state` says what is wrong in one word; `detail` says it for an operator."""

    state: State
    detail: str
    free_bytes: int | None
    probe_ms: float

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    def to_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "state": self.state,
            "detail": self.detail,
            "free_bytes": self.free_bytes,
            "probe_ms": round(self.probe_ms, 2),
        }


def probe_database(database: Store) -> DatabaseHealth:
    """Write-probe `database` on a new connection; never raises."""
    started = time.perf_counter()
    free = free_bytes(database.path)
    state, detail = _write_probe(database)
    if free is not None and free < MIN_FREE_BYTES and state in ("ok", "full", "unavailable"):
        # a full disk also fails the probe's open (no room for the WAL index) as an I/O error
        probe = "" if state == "ok" else f"; the probe failed: {detail}"
        state, detail = "full", f"only {free} bytes free on the database's filesystem{probe}"
    return DatabaseHealth(state, detail, free, (time.perf_counter() - started) * 1000)


def _write_probe(database: Store) -> tuple[State, str]:
    try:
        conn = database.connect()
    except StorageError as error:
        return _classified(error)
    try:
        # how long the probe waits for a lock: the engine's own timeouts (`Backend.limit_lock_wait`)
        database.backend.limit_lock_wait(conn, PROBE_BUSY_MS)
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE _health_probe (x INTEGER)")
        finally:
            conn.execute("ROLLBACK")
    except StorageError as error:
        return _classified(error)
    finally:
        conn.close()
    return "ok", "a new connection can write"


def _classified(error: StorageError) -> tuple[State, str]:
    if isinstance(error, StorageReadOnly):
        return "read_only", f"the database is read-only: {error} ({error.code})"
    if isinstance(error, StorageFull):
        return "full", f"the disk is full: {error}"
    if isinstance(error, StorageLocked):
        return "locked", f"the write lock was held for more than {PROBE_BUSY_MS} ms"
    return "unavailable", f"{error} ({error.code or type(error).__name__})"


def free_bytes(path: str) -> int | None:
    """Bytes available to this process on the filesystem of `path` (None: in memory, a database
    server (no path) or unknown)."""
    if path in (":memory:", ""):
        return None
    try:
        stats = os.statvfs(Path(path).parent)
    except OSError:
        return None
    return stats.f_bavail * stats.f_frsize
