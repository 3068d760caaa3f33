"""`python app.py` as a user runs it: create-user, the server itself, and configuration loading.

The subprocesses get a clean environment whose every path lives in the test's tmp dir, so
they never touch ./data or a developer's `.env` values.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests
from flask import Flask

from config.settings import ConfigError, load_settings
from tests.process_support import ROOT, clean_env, free_port, run_app, stop_process

# create-user ----------------------------------------------------------------------------------


def test_create_user_prints_a_working_token_last(tmp_path, base_settings, make_app: Callable[..., Flask], scripted):
    result = run_app(clean_env(tmp_path, base_settings), "create-user", "carol")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert "carol" in lines[0]
    token = lines[-1].strip()
    assert token and " " not in token

    app = make_app(llm_provider="scripted", scripted_replies=scripted([]))  # same DATABASE_PATH as the CLI
    client = app.test_client()
    assert client.get("/sessions", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert client.get("/sessions", headers={"Authorization": f"Bearer {token}x"}).status_code == 401


def test_create_user_twice_fails_cleanly(tmp_path, base_settings):
    env = clean_env(tmp_path, base_settings)
    assert run_app(env, "create-user", "dave").returncode == 0
    result = run_app(env, "create-user", "dave")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "dave" in result.stderr and "already exists" in result.stderr
    assert result.stdout.strip() == ""


def test_create_user_with_bad_config_names_the_variable(tmp_path, base_settings):
    result = run_app(clean_env(tmp_path, base_settings, MAX_TOOL_ROUNDS="9"), "create-user", "erin")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "MAX_TOOL_ROUNDS" in result.stderr


# the server -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_server_starts_and_answers_a_chat(tmp_path, base_settings):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["hello from script"]), encoding="utf-8")
    port = free_port()
    env = clean_env(
        tmp_path, base_settings, HOST="127.0.0.1", PORT=str(port), LLM_PROVIDER="scripted", SCRIPTED_REPLIES=str(script)
    )
    base = f"http://127.0.0.1:{port}"
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        health = None
        while time.monotonic() < deadline:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                health = requests.get(f"{base}/health", timeout=1)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        assert health is not None, "server did not answer /health within 20 s"
        assert health.status_code == 200
        assert health.json()["provider"]["name"] == "scripted"

        token = Path(base_settings["auth_token_file"]).read_text(encoding="utf-8").strip()
        assert token
        assert requests.post(f"{base}/chat", json={"message": "hi"}, timeout=10).status_code == 401
        answer = requests.post(
            f"{base}/chat", json={"message": "hi"}, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["reply"] == "hello from script"
        assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    finally:
        stop_process(server, log)


# config.load_settings -------------------------------------------------------------------------


def test_defaults_without_env_or_dotenv(tmp_path):
    settings = load_settings({}, dotenv_path=tmp_path / "missing.env")
    assert (settings.host, settings.port) == ("127.0.0.1", 5000)
    assert settings.database_path == "./data/app.db"
    assert settings.llm_provider == "ollama"
    assert settings.max_tool_rounds == 1
    assert settings.context_messages == 40


def test_env_is_read(tmp_path):
    settings = load_settings(
        {"PORT": "8123", "LLM_PROVIDER": "openai", "LLM_MODEL": "m", "MAX_TOOL_ROUNDS": "5", "TRACE_ENABLED": "1"},
        dotenv_path=None,
    )
    assert settings.port == 8123
    assert (settings.llm_provider, settings.llm_model) == ("openai", "m")
    assert settings.max_tool_rounds == 5
    assert settings.trace_enabled is True


def test_dotenv_is_read_and_the_environment_wins(tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text(
        "# comment\nPORT=7001\nLLM_MODEL=from-dotenv\nDATA_DIR=/srv/data\nLLM_API_KEY='quoted key'\n", encoding="utf-8"
    )
    settings = load_settings({"PORT": "7002"}, dotenv_path=dotenv)
    assert settings.port == 7002
    assert settings.llm_model == "from-dotenv"
    assert settings.data_dir == "/srv/data"
    assert settings.llm_api_key == "quoted key"


def test_empty_env_value_means_default(tmp_path):
    assert load_settings({"PORT": ""}, dotenv_path=None).port == 5000


@pytest.mark.parametrize(
    "name,value",
    [
        ("MAX_TOOL_ROUNDS", "9"),
        ("MAX_TOOL_ROUNDS", "0"),
        ("PORT", "abc"),
        ("PORT", "70000"),
        ("LLM_TIMEOUT_S", "-1"),
        ("CONTEXT_MESSAGES", "many"),
        ("SIGNUP_ENABLED", "maybe"),
        ("JUDGE_ENABLED", "perhaps"),
        ("TRACE_ENABLED", "2"),
        ("METRICS_OPEN", "yes please"),
    ],
)
def test_bad_value_is_a_config_error_naming_the_variable(name, value):
    with pytest.raises(ConfigError) as raised:
        load_settings({name: value}, dotenv_path=None)
    assert name in str(raised.value)


@pytest.mark.parametrize(("name", "value"), [("LLM_PROVIDER", "skynet"), ("VISION_PROVIDER", "hal")])
def test_a_provider_the_registry_does_not_know_is_a_config_error_naming_the_variable(name, value):
    """Which providers exist is the provider registry's to say (config is a leaf): the app's
    builder refuses the name at the start, naming the setting and the known names."""
    from providers import provider_registry, vision_config

    settings = load_settings({name: value}, dotenv_path=None)
    with pytest.raises(ConfigError) as raised:
        vision_config(settings)
    assert name in str(raised.value) and all(known in str(raised.value) for known in provider_registry())


@pytest.mark.parametrize("value", ["1", "true", "YES", "on", "0", "false", "No", "off"])
def test_a_boolean_setting_takes_the_usual_words(value):
    assert load_settings({"SIGNUP_ENABLED": value}, dotenv_path=None).signup_enabled is (
        value.lower() in {"1", "true", "yes", "on"}
    )


def test_bad_value_in_dotenv_is_a_config_error(tmp_path):
    dotenv = tmp_path / ".env"
    dotenv.write_text("PORT=abc\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="PORT"):
        load_settings({}, dotenv_path=dotenv)


def test_first_run_admin_is_created_even_after_create_user(tmp_path):
    from app import ensure_admin
    from storage.db import Database
    from storage.users import create_user, user_for_token

    database = Database(tmp_path / "a.db")
    database.migrate()
    with database.connection() as conn:
        create_user(conn, "admin")  # an ordinary user took the name first
    token = ensure_admin(database, str(tmp_path / "admin.token"))
    assert token is not None and (tmp_path / "admin.token").read_text().strip() == token
    with database.connection() as conn:
        admin = user_for_token(conn, token)
    assert admin is not None and admin.role == "admin" and admin.name == "admin2"
    assert ensure_admin(database, str(tmp_path / "again.token")) is None


def test_servers_starting_together_on_a_new_database_make_one_admin(tmp_path):
    """Processes behind a load balancer first started at once: one admin between them."""
    from concurrent.futures import ThreadPoolExecutor

    from app import ensure_admin
    from storage.db import Database
    from storage.users import count_users

    database = Database(tmp_path / "a.db")
    database.migrate()
    with ThreadPoolExecutor(8) as pool:
        tokens = list(pool.map(lambda n: ensure_admin(database, str(tmp_path / f"t{n}")), range(8)))
    assert sum(token is not None for token in tokens) == 1
    with database.connection() as conn:
        assert count_users(conn, role="admin") == 1


def test_processes_starting_together_on_a_new_data_dir_share_one_cookie_key(tmp_path):
    """Each would otherwise keep a key of its own, and a login made on one fails on the other."""
    import subprocess
    import sys

    code = "import sys; from pathlib import Path; from app import persistent_secret; print(persistent_secret(Path(sys.argv[1])))"
    path = tmp_path / "data" / "secret.key"
    runs = [
        subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True) for _ in range(6)
    ]
    keys = {run.communicate(timeout=60)[0].strip() for run in runs}
    assert keys == {path.read_text().strip()} and len(path.read_text().strip()) == 64
    assert [p.name for p in path.parent.iterdir()] == ["secret.key"]  # no drafts left behind
    assert path.stat().st_mode & 0o777 == 0o600


# tokens -----------------------------------------------------------------------------------------


def token_works(make_app: Callable[..., Flask], scripted, token: str) -> bool:  # type: ignore[no-untyped-def]
    app = make_app(llm_provider="scripted", scripted_replies=scripted([]))
    return app.test_client().get("/api/me", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_tokens_list_revoke_and_rotate(tmp_path, base_settings, make_app, scripted):
    env = clean_env(tmp_path, base_settings)
    alice = run_app(env, "create-user", "alice").stdout.strip().splitlines()[-1]
    second = run_app(env, "tokens", "rotate", "alice")
    assert second.returncode == 0, second.stderr
    rotated = second.stdout.strip().splitlines()[-1]
    assert not token_works(make_app, scripted, alice) and token_works(make_app, scripted, rotated)

    listing = run_app(env, "tokens", "list", "--user", "alice")
    assert listing.returncode == 0 and rotated not in listing.stdout
    rows = [line.split() for line in listing.stdout.strip().splitlines()[1:]]
    assert len(rows) == 1 and rows[0][1:3] == ["alice", "user"]
    assert "admin" not in listing.stdout  # filtered by --user
    assert run_app(env, "tokens", "list").stdout.count("\n") >= 2

    revoked = run_app(env, "tokens", "revoke", rows[0][0])
    assert revoked.returncode == 0 and not token_works(make_app, scripted, rotated)


@pytest.mark.parametrize(
    "args,message",
    [
        (("tokens", "revoke", "999"), "no token with id 999"),
        (("tokens", "rotate", "nobody"), "no user named 'nobody'"),
        (("reset-admin-token", "--user", "nobody"), "no user named 'nobody'"),
    ],
)
def test_token_commands_fail_cleanly(tmp_path, base_settings, args, message):
    result = run_app(clean_env(tmp_path, base_settings), *args)
    assert result.returncode != 0 and "Traceback" not in result.stderr and message in result.stderr


def test_reset_admin_token_replaces_a_lost_token(tmp_path, base_settings, make_app, scripted):
    make_app()  # the first start makes the admin and writes its token
    token_file = Path(base_settings["auth_token_file"])
    lost = token_file.read_text().strip()
    token_file.unlink()
    env = clean_env(tmp_path, base_settings)
    assert run_app(env, "create-user", "bob").returncode == 0
    refused = run_app(env, "reset-admin-token", "--user", "bob")
    assert refused.returncode != 0 and "not an admin" in refused.stderr
    result = run_app(env, "reset-admin-token")
    assert result.returncode == 0, result.stderr
    fresh = token_file.read_text().strip()
    assert fresh != lost and token_file.stat().st_mode & 0o777 == 0o600
    assert token_works(make_app, scripted, fresh) and not token_works(make_app, scripted, lost)


# owner-only files -------------------------------------------------------------------------------


def modes(root: Path) -> dict[str, int]:
    return {str(path.relative_to(root)): path.stat().st_mode & 0o777 for path in [root, *root.rglob("*")]}


@pytest.mark.slow
def test_the_server_keeps_its_files_to_its_own_user(tmp_path, base_settings):
    """Existing files are restricted at start; new ones (database, uploads) are made 0600/0700."""
    import base64

    from testing.fake_llm import FakeLLMServer, tiny_png

    data = Path(base_settings["data_dir"])
    (data / "workspaces" / "1").mkdir(parents=True)
    old = data / "workspaces" / "1" / "notes.txt"
    old.write_text("old")
    for path, mode in ((data, 0o755), (data / "workspaces", 0o755), (data / "workspaces" / "1", 0o775), (old, 0o664)):
        path.chmod(mode)
    port = free_port()
    with FakeLLMServer(default_reply="a picture") as llm:
        env = clean_env(
            tmp_path,
            base_settings,
            PORT=str(port),
            LLM_PROVIDER="openai",
            LLM_BASE_URL=llm.openai_base_url,
            LLM_MODEL="m",
        )
        log = (tmp_path / "server.log").open("w")
        server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            from tests.process_support import wait_until_serving

            wait_until_serving(server, f"http://127.0.0.1:{port}/health", tmp_path / "server.log")
            token = Path(base_settings["auth_token_file"]).read_text().strip()
            image = "data:image/png;base64," + base64.b64encode(tiny_png()).decode()
            answer = requests.post(
                f"http://127.0.0.1:{port}/chat",
                json={"message": "look", "images": [image]},
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
            found = {
                **modes(data),
                **{p.name: p.stat().st_mode & 0o777 for p in tmp_path.glob("app.db*")},
                "admin.token": Path(base_settings["auth_token_file"]).stat().st_mode & 0o777,
            }
        finally:
            stop_process(server, log)
    assert any(name.startswith("uploads/") and name.endswith(".png") for name in found), found
    assert "app.db" in found and "app.db-wal" in found and "secret.key" in found
    loose = {name: oct(mode) for name, mode in found.items() if mode & 0o077}
    assert loose == {}, loose
    assert found["workspaces/1/notes.txt"] == 0o600 and found["workspaces/1"] == 0o700


def test_create_user_on_a_fresh_database_makes_it_owner_only(tmp_path, base_settings):
    assert run_app(clean_env(tmp_path, base_settings), "create-user", "frank").returncode == 0
    assert Path(base_settings["database_path"]).stat().st_mode & 0o777 == 0o600
