"""Killing and removing sandboxes on an engine that may have gone away, and remembering what is owed.

A sandbox's last calls (kill at a deadline, inspect after a stop, remove) go through a client
with a short timeout (`CONTROL_TIMEOUT_S` of `judge/service.py`), so an engine that hangs costs a
run that timeout, not the long timeout of the client that creates containers. A removal the
engine could not be asked for is remembered here and done again by `retry()`, which the judge
calls when the engine answers after an outage (and at close): a container it could not kill may
still be running there with the user's program, and nothing else would stop it while this
process lives (the reaper only removes containers of dead processes).
"""

from __future__ import annotations

import threading

import docker

from judge.engine import ENGINE_ERRORS


class Cleanup:
    """Kill, inspect and remove through `client`; failed removals are owed until `retry()` does them."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self._owed: set[str] = set()
        self._lock = threading.Lock()

    def kill(self, container_id: str) -> bool:
        """Kill the container; False when the engine could not be asked (the container may still run)."""
        try:
            self.client.api.kill(container_id)
        except docker.errors.APIError:
            pass  # not running any more, or already removed
        except ENGINE_ERRORS:
            return False
        return True

    def oom_killed(self, container_id: str) -> bool:
        """Whether the engine OOM-killed the container (False once it is gone); raises `ENGINE_ERRORS`."""
        try:
            return bool(self.client.api.inspect_container(container_id)["State"].get("OOMKilled"))
        except docker.errors.NotFound:
            return False

    def remove(self, container_id: str) -> bool:
        """Remove the container, running or not; when the engine cannot be asked, it is owed."""
        try:
            self.client.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            pass
        except ENGINE_ERRORS:
            with self._lock:
                self._owed.add(container_id)
            return False
        return True

    def owed(self) -> list[str]:
        with self._lock:
            return sorted(self._owed)

    def retry(self) -> int:
        """Do the owed removals now; stops at the first engine failure (the rest stay owed).

        Returns how many were done.
        """
        done = 0
        for container_id in self.owed():
            try:
                self.client.api.remove_container(container_id, force=True)
            except docker.errors.NotFound:
                pass
            except ENGINE_ERRORS:
                break
            with self._lock:
                self._owed.discard(container_id)
            done += 1
        return done
