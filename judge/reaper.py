"""Removes containers of ours left over by a crash or a killed process (called at start-up).

Every sandbox carries the label `orchestrator.judge` plus the host name and process id of
the process that started it. At start-up the reaper removes the labelled containers whose
process is gone (same host, pid no longer alive), and those of other hosts sharing the
engine once they are older than `FOREIGN_MAX_AGE_S`. Containers of live processes (another
server, a test run) are left alone: removing them would kill runs in flight. The host label
is the judge's machine, not the engine's, so the rule holds on a remote engine shared by
several servers. An engine that fails while the reaper works ends the pass (what is left
waits for the next start). Removals a live judge owes after an outage are its own business
(`judge/cleanup.py`).
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

import docker
from docker.models.containers import Container

from judge.engine import ENGINE_ERRORS
from judge.sandbox import HOST_LABEL, LABEL, OWNER_LABEL, PID_LABEL

FOREIGN_MAX_AGE_S = 3600.0


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def age_s(container: object) -> float:
    created = str(getattr(container, "attrs", {}).get("Created", ""))
    try:
        started = datetime.fromisoformat(created[:26].rstrip("Z") + "+00:00")
    except ValueError:
        return float("inf")
    return (datetime.now(UTC) - started).total_seconds()


def orphaned(container: object, host: str) -> bool:
    labels = getattr(container, "labels", {}) or {}
    pid = labels.get(PID_LABEL, "")
    if labels.get(HOST_LABEL) == host and pid.isdigit():
        return not process_alive(int(pid))
    return age_s(container) > FOREIGN_MAX_AGE_S  # unlabelled (older builds) or another host


def reap(client: docker.DockerClient, owner: str | None = None) -> int:
    """Remove orphaned judge containers (every container of `owner` when given).

    Returns how many were removed.
    """
    label = LABEL if owner is None else f"{OWNER_LABEL}={owner}"
    host = socket.gethostname()
    removed = 0
    try:
        for container in client.containers.list(all=True, filters={"label": label}):
            if owner is None and not orphaned(container, host):
                continue
            removed += _remove(container)
    except ENGINE_ERRORS:
        pass  # the engine went away meanwhile: the rest waits for the next start
    return removed


def _remove(container: Container) -> int:
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        return 0
    return 1
