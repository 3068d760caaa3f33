"""`GET /api/status` (the page's banners) and the judge's `preparing` state (`judge/preparing.py`).

The judge's engine is faked at its boundary: a `DOCKER_HOST` socket that does not exist (no
engine answers) and, for a ready judge, `Judge.available` answering yes; the build is a real
process named in the marker file, as `scripts/judge_images.sh` writes it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from api.services import services_of
from judge.preparing import build_running, judge_state, marker_path
from judge.service import Judge
from storage.problems import add_problem
from tests.conftest import new_token

RUN = {"language": "python", "files": {"main.py": "print(1)"}}


@pytest.fixture
def auth_for():
    """A new user's headers on `app`."""
    return lambda app: {"Authorization": f"Bearer {new_token(app)}"}


@pytest.fixture
def building(tmp_path: Path) -> Iterator[Path]:
    """A live process named in `DATA_DIR/judge-images/building` (what the image build leaves)."""
    process = subprocess.Popen(["sleep", "60"])
    marker = marker_path(tmp_path / "data")
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{process.pid}\n")
    try:
        yield marker
    finally:
        process.kill()
        process.wait()


def stored_problem(app, auth, client) -> str:
    user_id = client.get("/api/me", headers=auth).get_json()["id"]
    with services_of(app).database.connection() as conn:
        problem = add_problem(
            conn,
            user_id=user_id,
            activity_id=None,
            language="python",
            difficulty="easy",
            title="Echo",
            statement="Print what you read.",
            starter_files={"main.py": "print(input())"},
            reference_files={"main.py": "print(input())"},
            tests=[{"name": "one", "stdin": "a\n", "expected_stdout": "a\n"}],
        )
    return problem.id


def judge_app(make_app, fake_llm, tmp_path: Path):
    return make_app(
        llm_base_url=fake_llm.openai_base_url,
        judge_enabled=True,
        docker_host=f"unix://{tmp_path}/no-engine.sock",
        health_cache_s=0,
    )


def test_model_up_then_down_with_recheck(make_app, fake_llm, auth_for):
    app = make_app(llm_base_url=fake_llm.openai_base_url, provider_recheck_s=0)
    auth = auth_for(app)
    client = app.test_client()
    up = client.get("/api/status?recheck=1", headers=auth).get_json()
    assert up["model"]["ok"] is True and up["model"]["providers"][0]["ok"] is True
    assert up["judge"]["state"] == "off"
    probes = len(fake_llm.get_paths)
    fake_llm.__exit__(None, None, None)  # the model goes away
    cached = client.get("/api/status", headers=auth).get_json()
    assert cached["model"]["ok"] is True and len(fake_llm.get_paths) == probes  # no recheck: the cached probe
    down = client.get("/api/status?recheck=1", headers=auth).get_json()
    assert down["model"]["ok"] is False and "does not answer" in down["model"]["message"]


def test_recheck_probes_at_most_once_per_recheck_interval(make_app, fake_llm, auth_for):
    app = make_app(llm_base_url=fake_llm.openai_base_url, provider_recheck_s=60)
    auth = auth_for(app)
    client = app.test_client()
    for _ in range(5):
        assert client.get("/api/status?recheck=1", headers=auth).get_json()["model"]["ok"] is True
    assert len([path for path in fake_llm.get_paths if path.endswith("/models")]) == 1


def test_status_needs_a_user(client):
    assert client.get("/api/status").status_code == 401


def test_no_engine_and_no_build_is_unavailable(make_app, fake_llm, tmp_path, auth_for):
    app = judge_app(make_app, fake_llm, tmp_path)
    auth = auth_for(app)
    client = app.test_client()
    assert client.get("/health").get_json()["judge"]["state"] == "unavailable"
    assert client.get("/api/status", headers=auth).get_json()["judge"]["state"] == "unavailable"
    answer = client.post("/run", json=RUN, headers=auth)
    assert answer.status_code == 503 and answer.get_json()["error"]["code"] == "judge_unavailable"


def test_a_running_build_makes_the_judge_preparing(make_app, fake_llm, tmp_path, building, auth_for):
    app = judge_app(make_app, fake_llm, tmp_path)
    assert services_of(app).judge is not None  # kept, to connect once the build's engine answers
    auth = auth_for(app)
    client = app.test_client()
    assert client.get("/health").get_json()["judge"]["state"] == "preparing"
    status = client.get("/api/status", headers=auth).get_json()["judge"]
    assert status["state"] == "preparing" and "being prepared" in status["message"]
    problem_id = stored_problem(app, auth, client)
    for path, body in (("/run", RUN), ("/submit", {**RUN, "problem_id": problem_id})):
        answer = client.post(path, json=body, headers=auth)
        assert answer.status_code == 503, path
        error = answer.get_json()["error"]
        assert error["code"] == "judge_preparing" and "being prepared" in error["message"]


def test_the_build_ending_leaves_ready_or_unavailable(make_app, fake_llm, tmp_path, building, auth_for, monkeypatch):
    app = judge_app(make_app, fake_llm, tmp_path)
    client = app.test_client()
    monkeypatch.setattr(Judge, "available", lambda self: (True, ""))  # the images are in: the engine says yes
    assert client.get("/health").get_json()["judge"]["state"] == "ready"
    monkeypatch.undo()
    building.write_text("999999999\n")  # the build's process is gone (killed), its marker left behind
    assert client.get("/health").get_json()["judge"]["state"] == "unavailable"


@pytest.mark.parametrize(
    "available, reason, preparing, state",
    [
        (True, "", True, "ready"),
        (True, "", False, "ready"),
        (False, "judge images missing", True, "preparing"),
        (False, "judge images missing", False, "unavailable"),
        (False, "disabled by JUDGE_ENABLED=0", False, "off"),
    ],
)
def test_judge_state_table(available, reason, preparing, state):
    assert judge_state(available, reason, preparing) == state


@pytest.mark.parametrize("content", ["", "abc", "-5", "0"])
def test_a_marker_without_a_live_process_is_no_build(tmp_path, content):
    marker = marker_path(tmp_path)
    marker.parent.mkdir(parents=True)
    marker.write_text(content)
    assert build_running(tmp_path) is False
    assert build_running(tmp_path / "missing") is False
