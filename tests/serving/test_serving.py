"""The production server: uvicorn, concurrent slow turns, graceful shutdown without losing a turn."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from storage.db import Database
from testing.fake_llm import FakeLLMServer
from testing.waiting import wait_until
from tests.process_support import ROOT, clean_env, free_port

pytestmark = pytest.mark.slow


def start_server(tmp_path: Path, base_settings, llm: FakeLLMServer) -> tuple[subprocess.Popen[str], str, str]:
    port = free_port()
    env = clean_env(
        tmp_path, base_settings, PORT=str(port), LLM_PROVIDER="openai", LLM_BASE_URL=llm.openai_base_url, LLM_MODEL="m"
    )
    process = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            requests.get(f"{base}/health", timeout=1)
            break
        except requests.ConnectionError:
            time.sleep(0.1)
    token = Path(base_settings["auth_token_file"]).read_text().strip()
    return process, base, token


def test_served_by_uvicorn_with_concurrent_slow_turns(tmp_path, base_settings):
    with FakeLLMServer(default_reply="slow answer", delay_s=1.0) as llm:
        process, base, token = start_server(tmp_path, base_settings, llm)
        try:
            headers = {"Authorization": f"Bearer {token}"}
            results: list[int] = []
            threads = [
                threading.Thread(
                    target=lambda: results.append(
                        requests.post(f"{base}/chat", json={"message": "hi"}, headers=headers, timeout=30).status_code
                    )
                )
                for _ in range(8)
            ]
            for thread in threads:
                thread.start()
            health = requests.get(f"{base}/health", timeout=5)  # not blocked by the slow turns
            for thread in threads:
                thread.join()
        finally:
            process.terminate()
            output = process.communicate(timeout=30)[0]
    assert health.status_code == 200
    assert results == [200] * 8
    # one turn at a time would never have two provider calls open at once
    assert llm.peak_in_flight >= 2, f"8 one-second turns ran one after the other ({llm.peak_in_flight} at most at once)"
    assert "uvicorn" in output.lower()


def test_sigterm_lets_a_turn_in_flight_finish_and_store(tmp_path, base_settings):
    with FakeLLMServer(default_reply="finished after shutdown began", delay_s=2.0) as llm:
        process, base, token = start_server(tmp_path, base_settings, llm)
        answer: list[requests.Response] = []
        request = threading.Thread(
            target=lambda: answer.append(
                requests.post(
                    f"{base}/chat",
                    json={"message": "keep me"},
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=30,
                )
            )
        )
        request.start()
        wait_until(lambda: llm.in_flight == 1, "the turn never reached the provider")  # it waits on it now
        process.send_signal(signal.SIGTERM)
        request.join(timeout=30)
        process.wait(timeout=30)
    assert answer and answer[0].status_code == 200
    assert answer[0].json()["reply"] == "finished after shutdown began"
    with Database(base_settings["database_path"]).connection() as conn:
        rows = conn.execute("SELECT role, content FROM chat_messages ORDER BY id").fetchall()
    assert [tuple(row) for row in rows] == [("user", "keep me"), ("assistant", "finished after shutdown began")]
