"""Loopback ports for the servers tests and benchmarks start: a port is chosen, then bound by
the server a moment later (a child process, often), so something else can take it in between.

Two things must never take it:

- an outgoing connection: the kernel gives those local ports from its ephemeral range
  (`net.ipv4.ip_local_port_range`, 32768-60999 by default), and with two test workers one of
  them may be opening thousands at once (tests/serving/test_nginx_capacity.py). So every port
  here is below that range, where only an explicit bind takes one;
- another pytest-xdist worker's server: each worker chooses from its own slice of each range
  (`worker_share`), so a server one worker stops and starts again on its port (Redis, in the
  outage tests) finds it free.

Within a slice, the first port tried depends on the process, so two runs of the suite at once
rarely meet either; a port something listens on is skipped.
"""

from __future__ import annotations

import os
import random
import socket

GENERAL = range(20000, 30000)  # `free_port()`: the servers, fakes and engines of most tests
REDIS = range(30000, 30500)  # tests/redis_support.py
NGINX = range(30500, 31000)  # tests/nginx_support.py
POSTGRES = range(31000, 31500)  # tests/pg_support.py
DOCKER = range(31500, 32500)  # tests/remote_docker_support.py: a second Docker engine


def worker_share(ports: range) -> range:
    """This pytest-xdist worker's slice of `ports` (all of them outside xdist)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if not worker.startswith("gw") or count <= 1:
        return ports
    size = len(ports) // count
    index = int(worker.removeprefix("gw")) % count
    return ports[index * size : (index + 1) * size]


def is_free(port: int) -> bool:
    """Whether nothing is bound to `port` on loopback now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def candidates(ports: range = GENERAL) -> list[int]:
    """This worker's ports of `ports`, from a start point of its own, wrapping around."""
    share = worker_share(ports)
    start = random.randrange(len(share))
    return [share[(start + step) % len(share)] for step in range(len(share))]


def free_port(ports: range = GENERAL, taken: tuple[int, ...] = ()) -> int:
    """A port of this worker's share of `ports` that nothing listens on (and not in `taken`)."""
    for port in candidates(ports):
        if port not in taken and is_free(port):
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")
