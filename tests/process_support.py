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


def wait_until_serving(process: subprocess.Popen[Any], url: str, log_path: Any = None, timeout_s: float = 30) -> None:
    """Poll `url` until the server subprocess answers it (any status); fail with its log if
    it exits or does not answer in time."""
    import time

    import pytest
    import requests

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            requests.get(url, timeout=2)
            return
        except requests.RequestException:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            log = log_path.read_text() if log_path is not None else ""
            pytest.fail(f"the server did not start (exit code {process.poll()}):\n{log[-4000:]}")
        time.sleep(0.1)
