"""A private Prometheus (Debian's `prometheus`) scraping servers the test names, on loopback.

The test writes its prometheus.yml (a job per target, the bearer token `/metrics` wants, a
one-second scrape interval) and starts the server on a free port with a temporary TSDB.
Without the binary the tests skip, or fail under `CI=true` or `PROMETHEUS_REQUIRED=1`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.process_support import free_port, stop_process

START_TIMEOUT_S = 30


def prometheus_required() -> bool:
    """Under CI (or PROMETHEUS_REQUIRED=1) a missing Prometheus is a failure, not a skip."""
    ci = os.environ.get("CI", "")
    return (ci != "" and ci.lower() not in ("0", "false")) or os.environ.get("PROMETHEUS_REQUIRED") == "1"


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        reason = "Debian's prometheus is not installed (scripts/services/prometheus.sh installs it)"
        if prometheus_required():
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@dataclass
class Prometheus:
    """One private Prometheus; `query` asks its HTTP API for an instant vector."""

    workdir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, targets: dict[str, str], bearer_token: str) -> None:
        """Scrape each `job: host:port`'s `/metrics` every second with `Authorization: Bearer`."""
        jobs = "".join(
            f"""  - job_name: {job}
    scrape_interval: 1s
    scrape_timeout: 1s
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials: {bearer_token}
    static_configs:
      - targets: ["{target}"]
"""
            for job, target in targets.items()
        )
        config = self.workdir / "prometheus.yml"
        config.write_text(f"global:\n  evaluation_interval: 1s\nscrape_configs:\n{jobs}", encoding="utf-8")
        log = (self.workdir / "prometheus.log").open("wb")
        self.process = subprocess.Popen(
            [
                prometheus_binary(),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not start:\n{(self.workdir / 'prometheus.log').read_text()[-3000:]}")
            time.sleep(0.2)

    def query(self, promql: str) -> list[dict[str, Any]]:
        answer = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5).json()
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        answer = requests.get(f"{self.url}/api/v1/targets", timeout=5).json()
        active: list[dict[str, Any]] = answer["data"]["activeTargets"]
        return active

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process)
