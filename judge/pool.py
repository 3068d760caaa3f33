"""Optional pool of pre-started single-use sandboxes, refilled in the background.

Starting a container costs ~0.25 s on the project machine, most of a trivial run, so the
pool keeps `size` started sandboxes per image (created with the judge's default limits) and
hands each out once: a container still never serves two runs. Used sandboxes come back
through `discard`, and the same background thread removes them, so removal is off the
request path too. Requests with other limits, or when the pool is empty, start their own
sandbox. `close()` removes everything; the reaper covers a process that died first.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable

import docker

from judge.models import Limits
from judge.sandbox import Sandbox, SandboxError

log = logging.getLogger(__name__)

_RETRY_AFTER_FAILURE_S = 5.0


class ContainerPool:
    """`size` ready sandboxes per image; one thread refills and removes."""

    def __init__(
        self, client: docker.DockerClient, images: Iterable[str], size: int, limits: Limits, owner: str = ""
    ) -> None:
        self.client = client
        self.owner = owner
        self.size = size
        self.limits = limits
        self._ready: dict[str, deque[Sandbox]] = {image: deque() for image in images}
        self._trash: deque[Sandbox] = deque()
        self._failed: set[str] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="judge-pool", daemon=True)
        self._thread.start()

    def take(self, image: str, limits: Limits) -> Sandbox | None:
        """A started sandbox for `image` with exactly `limits`, or None."""
        if limits != self.limits:
            return None
        with self._cond:
            ready = self._ready.get(image)
            box = ready.popleft() if ready else None
            self._cond.notify()
        return box

    def discard(self, box: Sandbox) -> None:
        """Hand a used sandbox over for removal in the background (it is killed there)."""
        with self._cond:
            if self._closed:
                box.destroy()
                return
            self._trash.append(box)
            self._cond.notify()

    def ready_count(self, image: str) -> int:
        with self._cond:
            return len(self._ready.get(image, ()))

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
        self._thread.join(30)
        with self._cond:
            leftovers = list(self._trash) + [box for ready in self._ready.values() for box in ready]
            self._trash.clear()
            for ready in self._ready.values():
                ready.clear()
        for box in leftovers:
            box.destroy()

    def _next_job(self) -> tuple[str, Sandbox | str] | None:
        """('destroy', box) first, then ('fill', image); None when closed. Caller holds no lock."""
        with self._cond:
            while not self._closed:
                if self._trash:
                    return "destroy", self._trash.popleft()
                for image, ready in self._ready.items():
                    if len(ready) < self.size and image not in self._failed:
                        return "fill", image
                self._cond.wait(_RETRY_AFTER_FAILURE_S if self._failed else None)
                self._failed.clear()
            return None

    def _loop(self) -> None:
        while (job := self._next_job()) is not None:
            kind, target = job
            if isinstance(target, Sandbox):
                target.destroy()
                continue
            try:
                box = Sandbox.start(self.client, target, self.limits, pooled=True, owner=self.owner)
            except SandboxError as error:
                log.warning("judge pool: %s", error)
                with self._cond:
                    self._failed.add(target)
                continue
            with self._cond:
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
