"""`python app.py create-user NAME --password` and `set-password NAME`: the password comes from
stdin (or the terminal), never from the command line; the token is still the last line."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from flask import Flask

from tests.process_support import ROOT, clean_env, run_app


def run_with_stdin(env: dict[str, str], stdin: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "app.py", *args], cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=60
    )


def test_create_user_with_a_password_from_stdin_signs_in_both_ways(
    tmp_path, base_settings, make_app: Callable[..., Flask], scripted
):
    env = clean_env(tmp_path, base_settings)
    result = run_with_stdin(env, "a long enough secret\n", "create-user", "carol", "--password")
    assert result.returncode == 0, result.stderr
    assert "a long enough secret" not in result.stdout + result.stderr
    token = result.stdout.strip().splitlines()[-1]

    app = make_app(llm_provider="scripted", scripted_replies=scripted([]))
    client = app.test_client()
    assert client.get("/sessions", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert client.post("/api/login", json={"name": "carol", "password": "a long enough secret"}).status_code == 200


def test_set_password_replaces_it_and_refuses_a_short_one(
    tmp_path, base_settings, make_app: Callable[..., Flask], scripted
):
    env = clean_env(tmp_path, base_settings)
    assert run_app(env, "create-user", "dave").returncode == 0  # no --password: a token only, as before
    short = run_with_stdin(env, "short\n", "set-password", "dave")
    assert short.returncode != 0 and "at least 8" in short.stderr and "Traceback" not in short.stderr
    missing = run_with_stdin(env, "whatever it is\n", "set-password", "nobody")
    assert missing.returncode != 0 and "no user named" in missing.stderr
    done = run_with_stdin(env, "dave's new password\n", "set-password", "dave")
    assert done.returncode == 0, done.stderr

    app = make_app(llm_provider="scripted", scripted_replies=scripted([]))
    client = app.test_client()
    assert client.post("/api/login", json={"name": "dave", "password": "dave's new password"}).status_code == 200


def test_the_password_is_never_an_argument(tmp_path, base_settings):
    env = clean_env(tmp_path, base_settings)
    result = run_app(env, "create-user", "erin", "--password", "hunter22hunter22")
    assert result.returncode != 0  # --password is a flag: a value after it is refused
    assert "Traceback" not in result.stderr
