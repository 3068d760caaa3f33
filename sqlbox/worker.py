"""A worker process: read a job from stdin, run it, write the answer to stdout, repeat.

Started by `pool.SqlBox` as `python -I -S -c …` (no site-packages, nothing of the product
but this package), so it starts in tens of milliseconds with a small footprint. Its hard
limits hold whatever SQLite or Python do inside one call:

- `RLIMIT_AS`: its start-up size plus `memory_mb`; an allocation past it fails (SQLite
  reports out of memory, Python raises MemoryError) or the process dies, never the server.
- `RLIMIT_CPU`: before each job the soft limit is set a few seconds past the job's own
  budget, so even a worker the server failed to kill stops by itself (SIGXCPU).
- The server kills it at the deadline (one function call may run far past a progress
  handler). It exits at end of stdin, so it dies with the server, and it retires itself
  (answer, then exit) when it has grown, so a reused worker is always small. It also exits
  after `IDLE_EXIT_S` without a job (a box that was dropped without `close()`); the server
  stops reusing a worker long before that (`pool.IDLE_REUSE_S`), so the two never race.
"""

from __future__ import annotations

import os
import resource
import select
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from sqlbox.memory_engine import Refused as MemoryRefused
from sqlbox.memory_engine import run_memory_job
from sqlbox.protocol import MAX_JOB_BYTES, MemoryJob, SelectJob, SqlError, job_from_dict, read_frame, write_frame
from sqlbox.select_engine import Refused as SelectRefused
from sqlbox.select_engine import run_select_job

CPU_SLACK_S = 3  # past the job's setup and deadline budget; the server kills it well before
SETUP_CPU_S = 5  # trusted set-up (views, a task's script) before the deadline starts
RETIRE_GROWTH_MB = 24  # resident growth after which the worker exits instead of being reused
IDLE_EXIT_S = 1200  # twice pool.IDLE_REUSE_S
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _statm() -> tuple[int, int]:
    """(virtual size, resident size) of this process, bytes."""
    with open("/proc/self/statm") as handle:
        size, resident = handle.read().split()[:2]
    return int(size) * _PAGE, int(resident) * _PAGE


def _limit_cpu(budget_s: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime + budget_s) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def run_job(data: dict[str, Any], started: Callable[[], None]) -> dict[str, Any]:
    """One job to one reply; every failure is a value."""
    try:
        job = job_from_dict(data)
    except (TypeError, ValueError) as error:
        return {"ok": False, "error": {"code": "UNAVAILABLE", "message": f"bad job: {error}"}}
    _limit_cpu(SETUP_CPU_S + job.deadline_s + CPU_SLACK_S)
    try:
        if isinstance(job, MemoryJob):
            answer: Any = run_memory_job(job, started)
        else:
            assert isinstance(job, SelectJob)
            answer = run_select_job(job, started)
    except (MemoryRefused, SelectRefused) as refused:
        return _error(refused.error)
    except MemoryError:
        return _error(SqlError("TOO_LARGE", "the query needs more memory than allowed; add a LIMIT or select "
                                            "fewer or shorter values."))
    except Exception as error:  # a setup script or database that cannot be used: not the statement's fault
        return _error(SqlError("UNAVAILABLE", f"the SQL engine failed: {type(error).__name__}: {str(error)[:200]}"))
    return {"ok": True, "answer": asdict(answer)}


def _error(error: SqlError) -> dict[str, Any]:
    return {"ok": False, "error": {"code": error.code, "message": error.message}}


def main(argv: list[str]) -> None:
    memory_mb = int(argv[0])
    size, base_resident = _statm()
    resource.setrlimit(resource.RLIMIT_AS, (size + memory_mb * 1024 * 1024,) * 2)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames may reach the server's pipe
    idle = select.poll()
    idle.register(stdin.fileno(), select.POLLIN)
    while True:
        if not idle.poll(IDLE_EXIT_S * 1000):
            return  # nobody has asked for a long time: a forgotten worker
        data = read_frame(stdin, MAX_JOB_BYTES)
        if data is None:
            return
        reply = run_job(data, lambda: write_frame(stdout, {"phase": "query"}))
        grown = _statm()[1] - base_resident > RETIRE_GROWTH_MB * 1024 * 1024
        reply["retire"] = grown
        write_frame(stdout, reply)
        if reply["retire"]:
            return


if __name__ == "__main__":
    main(sys.argv[1:])
