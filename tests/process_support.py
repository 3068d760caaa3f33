"""Stopping a server subprocess a test started: SIGTERM, then SIGKILL if it lingers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from config.settings import Settings
from testing.ports import free_port as free_port  # the one allocator (testing/ports.py)

ROOT = Path(__file__).resolve().parents[1]
SETTING_NAMES = {name.upper() for name in Settings.model_fields}


def clean_env(tmp_path: Path, base_settings: dict[str, object], **extra: str) -> dict[str, str]:
    """os.environ without any product setting, plus the test's paths and `extra`."""
    env = {key: value for key, value in os.environ.items() if key not in SETTING_NAMES and not key.endswith("_API_KEY")}
    env.update(
        DATABASE_PATH=str(base_settings["database_path"]),
        DATA_DIR=str(base_settings["data_dir"]),
        AUTH_TOKEN_FILE=str(base_settings["auth_token_file"]),
        PYTHONUNBUFFERED="1",
        JUDGE_ENABLED="0",  # these servers need no judge (and start no pool)
    )
    env.update(extra)
    return env


def run_app(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "app.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


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


def alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie waiting to be reaped counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    state = stat.read_text().rsplit(")", 1)[1].split()[0] if stat.exists() else "X"
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout_s: float = 5.0) -> list[int]:
    """The pids still alive after at most `timeout_s` of waiting for all of them to end."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]
