"""Optional pool of pre-started single-use sandboxes, refilled in the background.

Starting a container costs about ten times a trivial run (`bench/README.md`), so the
pool keeps `size` started sandboxes per image (created with the judge's default limits) and
hands each out once: a container still never serves two runs. Used sandboxes come back
through `discard`, and the same background workers remove them, so removal is off the
request path too. Requests with other limits start their own sandbox; when the pool is
empty a request may wait for the refill under way (`take(wait_s=...)`) and starts its own
only after that. Sustained throughput is therefore the engine's rate of container starts
and removals. `close()` removes everything; the reaper covers
a process that died first.

Two workers, because the engine starts two containers in about the time of one, and refilling comes before removing, so
back-to-back runs find a ready sandbox more often; removal goes first once `_MAX_TRASH`
used sandboxes wait, so they never pile up.

The server is one process (uvicorn, `serving/server.py`) with one `Judge` and so one pool; it closes
the pool when it stops (SIGTERM or SIGINT), and `atexit` closes it for any other process
that exits normally. A process that forks after creating a pool keeps no pool thread in the
child, and the child's copy of the ready sandboxes is also the parent's: the child forgets
them (the parent still owns them) and starts its own workers, so a container is never
handed out by two processes.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable

import docker

from judge.cleanup import Cleanup
from judge.models import Limits
from judge.sandbox import Sandbox, SandboxError

log = logging.getLogger(__name__)

_RETRY_AFTER_FAILURE_S = 5.0
_WORKERS = 2
_MAX_TRASH = 4  # used sandboxes waiting for removal before removal goes ahead of refilling


class ContainerPool:
    """`size` ready sandboxes per image; `_WORKERS` threads refill and remove."""

    def __init__(
        self,
        client: docker.DockerClient,
        images: Iterable[str],
        size: int,
        limits: Limits,
        owner: str = "",
        cleanup: Cleanup | None = None,
    ) -> None:
        self.client = client
        self.cleanup = cleanup  # kills and removals (see `Sandbox`)
        self.owner = owner
        self.size = size
        self.limits = limits
        self._images = list(images)
        self._closed = False
        self._start()
        os.register_at_fork(after_in_child=_weakly(weakref.ref(self), ContainerPool._start))
        atexit.register(_weakly(weakref.ref(self), ContainerPool.close))

    def _start(self) -> None:
        """Empty bookkeeping and fresh worker threads (at creation and in a forked child)."""
        self._ready: dict[str, deque[Sandbox]] = {image: deque() for image in self._images}
        self._starting: dict[str, int] = dict.fromkeys(self._images, 0)  # fills under way
        self._trash: deque[Sandbox] = deque()
        self._failed: set[str] = set()
        self._cond = threading.Condition()  # new: a parent thread may have held the old one at the fork
        self._threads = [
            threading.Thread(target=self._loop, name=f"judge-pool-{n}", daemon=True) for n in range(_WORKERS)
        ]
        for thread in self._threads:
            thread.start()

    def take(self, image: str, limits: Limits, wait_s: float = 0.0) -> Sandbox | None:
        """A started sandbox for `image` with exactly `limits`, or None.

        When none is ready, waits up to `wait_s` for the refill (always under way or due,
        unless starting failed): a start under way ends sooner than a new one, which would
        only compete with it for the engine (runs arriving faster than containers start).
        """
        if limits != self.limits:
            return None
        with self._cond:
            ready = self._ready.get(image)
            if ready is None:
                return None
            if not ready and wait_s > 0:
                self._cond.wait_for(lambda: ready or image in self._failed or self._closed, wait_s)
            box = ready.popleft() if ready else None
            self._cond.notify_all()
        return box

    def discard(self, box: Sandbox) -> None:
        """Hand a used sandbox over for removal in the background (it is killed there)."""
        with self._cond:
            if self._closed:
                box.destroy()
                return
            self._trash.append(box)
            self._cond.notify_all()

    def wait_full(self, timeout_s: float) -> bool:
        """Block until every image has `size` ready sandboxes (tests and benchmarks)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: all(len(q) >= self.size for q in self._ready.values()) or self._closed, timeout_s
            )

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(30)
        with self._cond:
            leftovers = list(self._trash) + [box for ready in self._ready.values() for box in ready]
            self._trash.clear()
            for ready in self._ready.values():
                ready.clear()
        for box in leftovers:
            box.destroy()

    def _next_job(self) -> tuple[str, Sandbox | str] | None:
        """('fill', image) first, then ('destroy', box); None when closed. Caller holds no lock."""
        with self._cond:
            while not self._closed:
                if len(self._trash) >= _MAX_TRASH:
                    return "destroy", self._trash.popleft()
                for image, ready in self._ready.items():
                    if len(ready) + self._starting[image] < self.size and image not in self._failed:
                        self._starting[image] += 1
                        return "fill", image
                if self._trash:
                    return "destroy", self._trash.popleft()
                self._cond.wait(_RETRY_AFTER_FAILURE_S if self._failed else None)
                self._failed.clear()
            return None

    def _loop(self) -> None:
        while (job := self._next_job()) is not None:
            _, target = job
            if isinstance(target, Sandbox):
                target.destroy()
                continue
            try:
                box = Sandbox.start(
                    self.client, target, self.limits, pooled=True, owner=self.owner, cleanup=self.cleanup
                )
            except SandboxError as error:
                log.warning("judge pool: %s", error)
                with self._cond:
                    self._starting[target] -= 1
                    self._failed.add(target)
                continue
            with self._cond:
                self._starting[target] -= 1
                if self._closed:
                    self._trash.append(box)
                else:
                    self._ready[target].append(box)
                self._cond.notify_all()
        with self._cond:
            trash = list(self._trash)
            self._trash.clear()
        for box in trash:
            box.destroy()


def _weakly(ref: weakref.ref[ContainerPool], method: Callable[[ContainerPool], None]) -> Callable[[], None]:
    """A fork or exit hook calling `method` on the pool unless it is closed or gone."""

    def hook() -> None:
        pool = ref()
        if pool is not None and not pool._closed:
            method(pool)

    return hook
