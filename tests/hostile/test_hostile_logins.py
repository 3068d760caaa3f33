"""A flood of password logins against the real server (`python app.py`): argon2 costs 64 MiB and
real CPU per hash, so the process runs at most `HASHES_AT_ONCE` at once for callers that failed
before, and one more place for a caller with a clean record (storage/passwords.py).

Asserted on what the process reports, not on time: its peak resident memory (`VmHWM`) grows by
at most the gate's places' worth, `/metrics` never shows more places busy than there are, every
flood request answers 401 (or 503 `busy` with `Retry-After` when it waited too long), and
another user's chat turn is answered while the flood runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from storage.passwords import HASHES_AT_ONCE, Passwords
from testing.fake_llm import FakeLLMServer
from tests.process_support import ROOT, SETTING_NAMES, free_port, stop_process, wait_until_serving

MIB = 1024 * 1024
HASH_MEMORY = 64 * MIB  # argon2-cffi's default memory_cost
FLOOD = 24
BUSY_LINE = re.compile(r'^orchestrator_queue_busy\{queue="passwords"\} (\S+)$', re.MULTILINE)


def peak_rss(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1)) * 1024


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with FakeLLMServer(default_reply="still here") as llm:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in SETTING_NAMES and not k.endswith("_API_KEY")}
        env.update(
            HOST="127.0.0.1",
            PORT=str(port),
            PYTHONUNBUFFERED="1",
            DATABASE_PATH=str(tmp_path / "app.db"),
            DATA_DIR=str(tmp_path / "data"),
            AUTH_TOKEN_FILE=str(tmp_path / "admin.token"),
            LLM_PROVIDER="openai",
            LLM_BASE_URL=llm.openai_base_url,
            LLM_MODEL="fake",
            JUDGE_ENABLED="0",
            METRICS_OPEN="1",
            WEB_THREADS="16",  # ungated, 16 hashes at once would take 1 GiB
            RATE_LIMITS="login=off,turns=off",  # every guess reaches the hash: the gate is what is tested
        )
        log_path = tmp_path / "server.log"
        log = log_path.open("w")
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_until_serving(process, f"{base}/health", log_path)
            yield {"base": base, "pid": process.pid, "admin": (tmp_path / "admin.token").read_text().strip()}
        finally:
            stop_process(process, log)


def test_a_login_flood_holds_bounded_memory_and_another_user_still_chats(server: dict[str, Any]) -> None:
    base, admin = server["base"], {"Authorization": f"Bearer {server['admin']}"}
    made = requests.post(
        base + "/api/admin/users",
        json={"name": "victim", "password": "the real password", "token": False},
        headers=admin,
        timeout=60,
    )
    assert made.status_code == 201, made.text
    other = requests.post(
        base + "/api/admin/users", json={"name": "bystander", "token": True}, headers=admin, timeout=60
    )
    bystander = {"Authorization": f"Bearer {other.json()['token']}"}
    warm = requests.post(base + "/api/login", json={"name": "victim", "password": "the real password"}, timeout=60)
    assert warm.status_code == 200  # one hash has run: the baseline holds its memory once
    baseline = peak_rss(server["pid"])

    answers: list[requests.Response] = []
    start = threading.Barrier(FLOOD + 1)

    def guess(n: int) -> None:
        start.wait()
        answers.append(
            requests.post(base + "/api/login", json={"name": "victim", "password": f"guess number {n}"}, timeout=120)
        )

    busy_seen: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            metrics = requests.get(base + "/metrics", timeout=30).text
            busy_seen.extend(float(value) for value in BUSY_LINE.findall(metrics))

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(FLOOD)]
    watcher = threading.Thread(target=watch)
    watcher.start()
    for thread in threads:
        thread.start()
    start.wait()
    chat = requests.post(base + "/chat", json={"message": "are you there?"}, headers=bystander, timeout=120)
    for thread in threads:
        thread.join()
    done.set()
    watcher.join()

    assert chat.status_code == 200 and chat.json()["reply"] == "still here"
    statuses = sorted({answer.status_code for answer in answers})
    assert len(answers) == FLOOD and set(statuses) <= {401, 503}, statuses
    assert all(answer.headers.get("Retry-After") for answer in answers if answer.status_code == 503)
    assert busy_seen and max(busy_seen) <= HASHES_AT_ONCE
    growth = peak_rss(server["pid"]) - baseline
    assert growth <= Passwords().places * HASH_MEMORY + 32 * MIB, f"peak memory grew by {growth / MIB:.0f} MiB"
    assert requests.get(base + "/api/me", headers=bystander, timeout=30).status_code == 200
