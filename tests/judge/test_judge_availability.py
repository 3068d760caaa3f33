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


class CountingClient:
    """A Docker client stand-in that counts how often the engine is asked."""

    def __init__(self, tags: list[str]) -> None:
        self.pings = 0
        self.images = self
        self._tags = tags

    def ping(self) -> bool:
        self.pings += 1
        return True

    def list(self, name: str) -> list[object]:
        return [type("Image", (), {"tags": self._tags})()]


def test_a_ready_engine_is_asked_again_only_after_the_ttl() -> None:
    from judge.languages import LANGUAGES

    client = CountingClient(sorted({language.image for language in LANGUAGES.values()}))
    judge = Judge(client)  # type: ignore[arg-type]
    assert judge.available() == (True, "") and judge.available() == (True, "")
    assert client.pings == 1
    expired = Judge(client, available_ttl_s=0.0)  # type: ignore[arg-type]
    assert expired.available() == (True, "")
    assert client.pings == 2
    expired.available()
    assert client.pings == 3


def test_a_missing_image_is_never_cached() -> None:
    client = CountingClient([])
    judge = Judge(client)  # type: ignore[arg-type]
    assert judge.available()[0] is False and judge.available()[0] is False
    assert client.pings == 2


@pytest.mark.parametrize(
    ("labels", "created", "expected"),
    [
        ({"orchestrator.judge.host": "here", "orchestrator.judge.pid": "1"}, "2026-01-01T00:00:00Z", False),
        ({"orchestrator.judge.host": "here", "orchestrator.judge.pid": "999999999"}, "2099-01-01T00:00:00Z", True),
        (
            {"orchestrator.judge.host": "elsewhere", "orchestrator.judge.pid": "1"},
            "2000-01-01T00:00:00.123456789Z",
            True,
        ),
        ({}, "2999-01-01T00:00:00Z", False),  # unlabelled and new: may belong to a live process
        ({}, "not a date", True),
    ],
)
def test_orphan_rule(labels: dict[str, str], created: str, expected: bool) -> None:
    from judge.reaper import orphaned

    container = type("Container", (), {"labels": labels, "attrs": {"Created": created}})()
    assert orphaned(container, "here") is expected
