"""Stopping a server subprocess a test started: SIGTERM, then SIGKILL if it lingers."""

from __future__ import annotations

import subprocess
from typing import IO, Any


def stop_process(process: subprocess.Popen[Any], log: IO[Any] | None = None, timeout_s: float = 10) -> None:
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if log is not None:
        log.close()
