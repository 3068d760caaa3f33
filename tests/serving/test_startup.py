"""`python app.py` tells a newcomer what is wrong: the start-up report (`serving/startup.py`), the
one-line errors of a bad configuration, and the same fix hint in `/health` and the log of a
failed turn (the chat error says what happened in the user's words).

Every server here is a real `python app.py` subprocess on a free loopback port, with its files
in the test's tmp dir (testing/hostile.py `running_server`, tests/cli/test_cli.py `clean_env`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from testing.fake_llm import FakeLLMServer
from testing.hostile import free_port, running_server
from tests.process_support import clean_env, run_app

OLLAMA_FIX = "start Ollama (`ollama serve`) and pull the model (`ollama pull {model}`)"
RECONFIGURE = "set LLM_PROVIDER, LLM_BASE_URL and LLM_MODEL"
DEMO = "run `make demo`"


def startup_lines(tmp: Path) -> list[str]:
    """The start-up report's lines from the server's log, without time stamps."""
    log = (tmp / "server.log").read_text(encoding="utf-8")
    return [line.split(" startup: ", 1)[1] for line in log.splitlines() if " startup: " in line]


def test_the_report_names_the_url_the_token_file_a_reachable_model_and_the_judge(tmp_path):
    with FakeLLMServer() as llm:
        env = {
            "LLM_PROVIDER": "openai",
            "LLM_BASE_URL": llm.openai_base_url,
            "LLM_MODEL": "tiny-model",
            "LLM_API_KEY": "sk-secret-key-value",
        }
        with running_server(tmp_path, env) as server:
            lines = startup_lines(tmp_path)
            log = (tmp_path / "server.log").read_text(encoding="utf-8")
    assert lines[0] == f"open http://127.0.0.1:{server.port}/ in a browser"
    assert lines[1].startswith(f"admin token: in {tmp_path.resolve() / 'admin.token'} ")
    assert lines[2] == "provider: openai, model tiny-model: answers (reachable)"
    assert lines[3].startswith("judge: off (disabled by JUDGE_ENABLED=0)")
    assert server.admin_token not in log and "sk-secret-key-value" not in log


def test_an_unreachable_model_is_a_warning_with_the_fix(tmp_path):
    env = {"LLM_PROVIDER": "ollama", "LLM_BASE_URL": f"http://127.0.0.1:{free_port()}", "LLM_MODEL": "qwen2.5:0.5b"}
    with running_server(tmp_path, env):
        log = (tmp_path / "server.log").read_text(encoding="utf-8")
    warning = next(line for line in log.splitlines() if "WARNING startup: provider:" in line)
    assert "provider: ollama, model qwen2.5:0.5b: NOT reachable (connection failed); to fix it, " in warning
    assert OLLAMA_FIX.format(model="qwen2.5:0.5b") in warning
    assert RECONFIGURE in warning and DEMO in warning


def test_health_and_the_log_carry_the_same_hint_and_the_chat_error_the_users_words(tmp_path):
    env = {"LLM_PROVIDER": "ollama", "LLM_BASE_URL": f"http://127.0.0.1:{free_port()}", "LLM_MODEL": "qwen2.5:0.5b"}
    with running_server(tmp_path, env) as server:
        provider = requests.get(f"{server.base}/health", timeout=10).json()["provider"]
        answer = requests.post(
            f"{server.base}/chat", json={"message": "hi"}, headers=server.auth(server.admin_token), timeout=60
        )
        log = (tmp_path / "server.log").read_text(encoding="utf-8")
    assert provider["ok"] is False and provider["detail"] == "connection failed"
    assert provider["hint"].startswith(OLLAMA_FIX.format(model="qwen2.5:0.5b"))
    assert provider["chain"][0]["hint"] == provider["hint"]
    assert answer.status_code == 502
    error = answer.json()["error"]
    assert error["code"] == "provider_unavailable" and error["details"] == {"reason": "unreachable"}
    assert error["message"].startswith("The model cannot be reached right now. Your message was kept")
    for operator_word in ("127.0.0.1", "LLM_", "make demo", "ollama serve"):
        assert operator_word not in error["message"]
    turn_line = next(line for line in log.splitlines() if "no provider answered" in line)
    assert "(ollama/qwen2.5:0.5b: connection" in turn_line and provider["hint"] in turn_line


def test_a_rejected_key_hints_at_the_key_not_at_ollama(tmp_path):
    with FakeLLMServer() as llm:
        env = {"LLM_PROVIDER": "openrouter", "LLM_BASE_URL": llm.openai_base_url, "LLM_MODEL": "some/model"}
        with running_server(tmp_path, env) as server:
            provider = requests.get(f"{server.base}/health", timeout=10).json()["provider"]
            warning = next(line for line in startup_lines(tmp_path) if line.startswith("provider:"))
    assert provider["hint"].startswith("give openrouter a valid API key (LLM_API_KEY)")
    assert "ollama" not in provider["hint"] and provider["hint"] in warning


def test_a_healthy_provider_has_no_hint(tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["hello"]), encoding="utf-8")
    with running_server(tmp_path, {"LLM_PROVIDER": "scripted", "SCRIPTED_REPLIES": str(script)}) as server:
        provider = requests.get(f"{server.base}/health", timeout=10).json()["provider"]
        lines = startup_lines(tmp_path)
    assert provider["ok"] is True and "hint" not in provider
    assert "provider: scripted, model scripted: answers (ready)" in lines


def bad_scripts(tmp: Path) -> dict[str, tuple[dict[str, str], str]]:
    """name -> (environment, the one line expected on stderr)."""
    invalid = tmp / "invalid.json"
    invalid.write_text('{"rules": [{"user": "x"}], "default": "d"}', encoding="utf-8")
    not_json = tmp / "not.json"
    not_json.write_text("[1", encoding="utf-8")
    missing = tmp / "missing.json"
    return {
        "unset": ({"LLM_PROVIDER": "scripted"}, "Error: LLM_PROVIDER=scripted needs SCRIPTED_REPLIES"),
        "missing": (
            {"LLM_PROVIDER": "scripted", "SCRIPTED_REPLIES": str(missing)},
            f"Error: SCRIPTED_REPLIES file {str(missing)!r} does not exist",
        ),
        "directory": (
            {"LLM_PROVIDER": "scripted", "SCRIPTED_REPLIES": str(tmp)},
            f"Error: SCRIPTED_REPLIES file {str(tmp)!r} cannot be read: Is a directory",
        ),
        "invalid": (
            {"LLM_PROVIDER": "scripted", "SCRIPTED_REPLIES": str(invalid)},
            f"Error: SCRIPTED_REPLIES file {str(invalid)!r} is invalid: Field required at rules.0",
        ),
        "not json": (
            {"LLM_PROVIDER": "scripted", "SCRIPTED_REPLIES": str(not_json)},
            f"Error: SCRIPTED_REPLIES file {str(not_json)!r} is invalid: not JSON",
        ),
        "bad setting": ({"PORT": "abc"}, "Error: invalid configuration: PORT:"),
        "bad fallback": ({"LLM_FALLBACKS": "bogus"}, "Error: bad fallback entry 'bogus'"),
    }


@pytest.mark.parametrize(
    "case", ["unset", "missing", "directory", "invalid", "not json", "bad setting", "bad fallback"]
)
def test_a_bad_configuration_is_one_line_and_exit_code_2(tmp_path, base_settings, case):
    extra, expected = bad_scripts(tmp_path)[case]
    result = run_app(clean_env(tmp_path, base_settings, **{"PORT": str(free_port()), **extra}))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith(expected), result.stderr
    assert "Traceback" not in result.stderr
