"""Script calls to Redis that a turn need not wait for, sent in order and in batches.

A plain turn publishes a dozen events (`turn.started`, `provider.request`, each
`answer.delta`, `message.stored`, …) and tidies its claim when it ends. Made one by one,
each costs the turn thread a round trip to Redis: most of what Redis added to a turn
(figures in `bench/README.md`). `Outbox.post` queues a script call and returns
at once; one sender thread per process sends what is queued, in order, as one pipeline per
batch (a burst becomes one round trip), then hands each result to its callback (the event
log wakes its local waiters with the new id). `flush()` waits until every call queued
before it has been sent: a synchronous publish (a turn's terminal event) flushes first, so
the end of a run never overtakes its own deltas.

Calls carry the script's text (`EVAL`, which Redis caches by hash): by hash alone, redis-py
asks `SCRIPT EXISTS` first, one more round trip per batch, and a Redis that lost its
scripts (restarted) would refuse part of a batch whose other part already ran. A batch that
fails (Redis away) is dropped and its error kept; the next `flush()` raises it, so the turn whose events were
lost ends with the same 503 a failed publish gives.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.commands.core import Script

log = logging.getLogger("events.redis")

MAX_BATCH = 256  # calls per pipeline
FLUSH_TIMEOUT_S = 30.0  # a sender stuck longer than this (Redis's socket timeout is 5 s) is a fault


@dataclass(frozen=True)
class Call:
    """One queued script call, and what to do with its result once it is back."""

    script: Script
    keys: Sequence[str]
    args: Sequence[Any]
    done: Callable[[Any], None] | None = None


class Outbox:
    """Ordered write-behind of script calls; thread-safe; one sender thread, started on first use."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._queue: deque[Call] = deque()
        self._ready = threading.Condition()
        self._queued = 0  # calls ever queued
        self._done = 0  # calls ever sent or dropped
        self._error: Exception | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def post(self, call: Call) -> None:
        with self._ready:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="redis-outbox", daemon=True)
                self._thread.start()
            self._queue.append(call)
            self._queued += 1
            self._ready.notify_all()

    def flush(self) -> None:
        """Wait until everything queued so far is sent; raise the error of a dropped batch."""
        with self._ready:
            target = self._queued
            if not self._ready.wait_for(lambda: self._done >= target or self._closed, FLUSH_TIMEOUT_S):
                raise redis.TimeoutError("calls queued for Redis were not sent in time")
            error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Send what is queued, then stop the sender."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(FLUSH_TIMEOUT_S)

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: bool(self._queue) or self._closed)
                if not self._queue:
                    return  # closed and drained
                batch = [self._queue.popleft() for _ in range(min(len(self._queue), MAX_BATCH))]
            error: Exception | None = None
            try:
                results = self._send(batch)
                for call, result in zip(batch, results, strict=True):
                    if call.done is not None:
                        call.done(result)
            except Exception as failure:  # Redis away: these calls are lost; the next flush says so
                log.warning("sending %d calls to Redis failed: %s", len(batch), failure)
                error = failure
            with self._ready:
                self._done += len(batch)
                if error is not None:
                    self._error = error
                self._ready.notify_all()

    def _send(self, batch: Sequence[Call]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for call in batch:
            source = call.script.script
            pipe.eval(
                source if isinstance(source, str) else bytes(source).decode(), len(call.keys), *call.keys, *call.args
            )
        return list(pipe.execute())
