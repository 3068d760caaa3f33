"""Debian's real Prometheus scrapes a real server's `/metrics` with the bearer token (SPEC 16):
after some turns its HTTP API answers the same counts the server made."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testing.fake_llm import FakeLLMServer
from testing.waiting import wait_until
from tests.process_support import ROOT, clean_env, free_port, stop_process, wait_until_serving
from tests.prometheus_support import Prometheus, prometheus_binary

pytestmark = pytest.mark.slow
TOKEN = "prometheus-scrapes-with-this"


@pytest.fixture
def server(tmp_path: Path, base_settings) -> Iterator[tuple[str, str, FakeLLMServer]]:
    with FakeLLMServer(default_reply="Hello from the model.") as llm:
        port = free_port()
        env = clean_env(
            tmp_path,
            base_settings,
            PORT=str(port),
            LLM_PROVIDER="openai",
            LLM_BASE_URL=llm.openai_base_url,
            LLM_MODEL="m",
            METRICS_TOKEN=TOKEN,
        )
        log_path = tmp_path / "server.log"
        log = log_path.open("w")
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_serving(process, f"http://127.0.0.1:{port}/health/live", log_path)
            token = Path(base_settings["auth_token_file"]).read_text().strip()
            yield f"127.0.0.1:{port}", token, llm
        finally:
            stop_process(process, log)


def test_prometheus_scrapes_the_turn_counts_with_the_bearer_token(tmp_path, server):
    prometheus_binary()  # skip (or fail under CI) before starting anything
    target, token, llm = server
    headers = {"Authorization": f"Bearer {token}"}
    llm.queue("/remember likes tea", "Noted.")
    for text in ("I like tea", "hi", "hello"):
        answer = requests.post(f"http://{target}/chat", json={"message": text}, headers=headers, timeout=30)
        assert answer.status_code == 200
    prometheus = Prometheus(tmp_path / "prometheus", port=free_port())
    prometheus.workdir.mkdir()
    prometheus.start({"orchestrator": target}, TOKEN)
    try:
        turns = 'orchestrator_turns_total{job="orchestrator",kind="chat",outcome="done"}'
        wait_until(lambda: bool(prometheus.query(turns)), "prometheus never scraped the turns counter", timeout_s=30)
        assert float(prometheus.query(turns)[0]["value"][1]) == 3
        tools = 'orchestrator_tool_runs_total{job="orchestrator",tool="remember",outcome="ok"}'
        assert float(prometheus.query(tools)[0]["value"][1]) == 1
        first_tokens = 'orchestrator_time_to_first_token_seconds_count{job="orchestrator",provider="openai"}'
        assert float(prometheus.query(first_tokens)[0]["value"][1]) == 4
        assert prometheus.query('up{job="orchestrator"}')[0]["value"][1] == "1"
        # the same server scraped with a wrong token is down: /metrics refused it
        prometheus.stop()
        prometheus = Prometheus(tmp_path / "prometheus-wrong", port=free_port())
        prometheus.workdir.mkdir()
        prometheus.start({"wrong_token": target}, "not-the-token")
        wait_until(lambda: bool(prometheus.query('up{job="wrong_token"}')), "never scraped", timeout_s=30)
        assert prometheus.query('up{job="wrong_token"}')[0]["value"][1] == "0"
        assert "401" in str(prometheus.targets()[0].get("lastError"))
    finally:
        prometheus.stop()
