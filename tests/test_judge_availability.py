"""Without a Docker engine the judge says why, and runs become internal errors (no engine needed)."""

from __future__ import annotations

import pytest

from judge.models import RunRequest
from judge.service import Judge


def test_unreachable_engine_reports_why_and_fails_runs_as_internal_error() -> None:
    judge = Judge(None, reason="Docker engine unreachable: test")
    assert judge.available() == (False, "Docker engine unreachable: test")
    verdict = judge.run(RunRequest(language="python", files={"main.py": "print(1)"}))
    assert verdict.status == "internal_error" and "unreachable" in verdict.stderr


def test_judge_from_env_with_a_dead_engine_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    judge = Judge.from_env()
    ready, reason = judge.available()
    assert not ready and "unreachable" in reason
