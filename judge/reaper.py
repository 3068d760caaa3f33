"""Removes containers of ours left over by a crash or a killed process (called at start-up).

Every sandbox carries the label `orchestrator.judge`; nothing else is touched. Run it
before this process starts any sandbox of its own: it removes every labelled container,
running or not, including the pool of another process sharing the engine (that process
then starts fresh containers: a pooled container that is gone is replaced, see
`judge/pool.py`).
"""

from __future__ import annotations

import docker

from judge.sandbox import LABEL, OWNER_LABEL


def reap(client: docker.DockerClient, owner: str | None = None) -> int:
    """Remove every container labelled `orchestrator.judge` (only `owner`'s when given).

    Returns how many were removed.
    """
    label = LABEL if owner is None else f"{OWNER_LABEL}={owner}"
    removed = 0
    for container in client.containers.list(all=True, filters={"label": label}):
        try:
            container.remove(force=True)
            removed += 1
        except docker.errors.NotFound:
            pass
    return removed
