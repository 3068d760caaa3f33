"""A first run in a minute (issue 26 item 9): what `python app.py` says when the model does not
answer (where it looked, and `make demo`), and that the judge is "being prepared" while its
images are built in the background; the README's curl lines follow `$PORT`.

Servers are real `python app.py` processes (testing/hostile.py `running_server`)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import requests

from judge.preparing import marker_path
from testing.fake_llm import FakeLLMServer
from testing.hostile import free_port, running_server

ROOT = Path(__file__).resolve().parents[2]


def startup_lines(tmp: Path) -> list[str]:
    log = (tmp / "server.log").read_text(encoding="utf-8")
    return [line.split(" startup: ", 1)[1] for line in log.splitlines() if " startup: " in line]


def test_no_model_says_where_it_looked_and_how_to_try_the_demo(tmp_path):
    port = free_port()
    env = {
        "LLM_PROVIDER": "openai",
        "LLM_BASE_URL": f"http://someone:s3cret@127.0.0.1:{port}/v1?key=hidden",
        "LLM_MODEL": "m",
    }
    with running_server(tmp_path, env) as server:
        assert requests.get(f"{server.base}/health", timeout=10).status_code == 200  # it serves anyway
    lines = startup_lines(tmp_path)
    hint = next(line for line in lines if line.startswith("the model at "))
    assert hint.startswith(f"the model at http://127.0.0.1:{port}/v1 does not answer (connection failed)")
    assert "`make demo`" in hint
    assert "s3cret" not in "\n".join(lines) and "hidden" not in "\n".join(lines)
    assert lines.index(hint) < next(i for i, line in enumerate(lines) if line.startswith("provider:"))


def test_a_reachable_model_gives_no_demo_hint(tmp_path):
    with FakeLLMServer() as llm:
        env = {"LLM_PROVIDER": "openai", "LLM_BASE_URL": llm.openai_base_url, "LLM_MODEL": "m"}
        with running_server(tmp_path, env):
            pass
    assert not any(line.startswith("the model at ") for line in startup_lines(tmp_path))


def test_a_build_in_the_background_makes_the_judge_preparing(tmp_path):
    """What `make run` leaves: the build's process id in DATA_DIR/judge-images/building; the
    engine is faked at its boundary as a socket where no engine answers."""
    build = subprocess.Popen(["sleep", "120"])
    try:
        marker = marker_path(tmp_path)
        marker.parent.mkdir(parents=True)
        marker.write_text(f"{build.pid}\n")
        env = {"JUDGE_ENABLED": "1", "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock", "HEALTH_CACHE_S": "0"}
        with running_server(tmp_path, env) as server:
            assert requests.get(f"{server.base}/health", timeout=10).json()["judge"]["state"] == "preparing"
            run = requests.post(
                f"{server.base}/run",
                json={"language": "python", "files": {"main.py": "print(1)"}},
                headers=server.auth(server.admin_token),
                timeout=10,
            )
            assert run.status_code == 503 and run.json()["error"]["code"] == "judge_preparing"
            build.kill()
            build.wait()
            assert requests.get(f"{server.base}/health", timeout=10).json()["judge"]["state"] == "unavailable"
        assert any(line.startswith("judge: being prepared") for line in startup_lines(tmp_path))
    finally:
        build.kill()
        build.wait()


# README ---------------------------------------------------------------------------------------

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
# our server's address with a literal port (5000, 8080 …) rather than ${PORT:-5000}
FIXED_PORT = re.compile(r"(?:127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1\]):(\d{2,5})\b")
# other services' ports: Ollama, Docker over TLS, SearXNG, Redis, PostgreSQL, vLLM, an MCP server
OTHER_SERVICES = {"11434", "2376", "8888", "6379", "5432", "8000", "8808"}
# files a program reads (JSON, nginx, YAML) cannot follow a variable: they show the default port
CONFIG_BLOCKS = {"json", "nginx", "yaml", "text"}


def test_readme_code_blocks_use_port_not_a_fixed_port():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = []
    for lang, block in FENCE.findall(readme):
        if lang in CONFIG_BLOCKS:
            continue
        chosen = set(re.findall(r"\bPORT=(\d+)", block))  # a block that sets PORT itself may use it
        for line in block.splitlines():
            found += [
                f"{m.group(0)} in: {line.strip()}"
                for m in FIXED_PORT.finditer(line)
                if m.group(1) not in OTHER_SERVICES | chosen
            ]
    assert found == [], "README code lines name our server with a fixed port (use ${PORT:-5000}):\n" + "\n".join(found)


def test_readme_leads_with_the_demo():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    demo, run = readme.find("make demo"), readme.find("make run")
    assert 0 <= demo < run, "the README shows `make demo` (no model needed) before `make run`"
