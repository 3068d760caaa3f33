"""Schemathesis against the real server (`python app.py`), every operation of /openapi.json.

Checks: no 5xx (`not_a_server_error`), every status and content type declared, every JSON
answer and every SSE event matching its declared schema, every answer within
`MAX_RESPONSE_S`, data the schema forbids refused with a 4xx, and no operation that declares
authentication answering without it (`ignored_auth`). The server runs offline: the scripted provider answers every turn at once,
the judge is switched off by JUDGE_ENABLED=0 (its endpoints answer their declared, fast
503, and are still fuzzed), upstream services point at a closed loopback port (their
tools answer a declared 502/503), rate limits are generous (429 is declared anyway). The
stateful phase follows the document's links (a created session to the operations on it).
The seed is fixed so CI is repeatable; `FUZZ_SEED=…` explores another part of the space.
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from testing.hostile import ServerUnderTest, free_port, running_server

pytestmark = pytest.mark.slow

MAX_RESPONSE_S = 5
EXAMPLES_PER_OPERATION = 8
RUN_TIMEOUT_S = 150
SEED = int(os.environ.get("FUZZ_SEED", "20261124"))
CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,"
    "negative_data_rejection,ignored_auth"
)
GENEROUS = "turns=100000/minute,runs=100000/minute,generate=100000/minute,login=100000/minute,sessions=100000/minute"

# 5xx answers that are this server's configuration, not a failure: no judge, no upstreams.
# Each is declared in the document; the fuzzer may see it only on these operations.
CONFIGURED_OFF = """
[[operations]]
include-path-regex = "^/(run|submit|activities/generate|tools/run_code|tools/submit)$"
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "503"]

[[operations]]
include-path-regex = "^/tools/(web_search|open_url|weather|imagine|image_analyze)$"
checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "502", "503", "504"]
"""
# a real session (with a stored turn) for some of the generated ids, so the fuzzer gets past 404
REAL_SESSION = """
[dictionaries.sessions]
values = ["{session_id}"]

[parameters]
"path.session_id" = {{ dictionary = "sessions", probability = 0.7 }}
"body.session_id" = {{ dictionary = "sessions", probability = 0.5 }}
"path.user_id" = {user_id}
"path.token_id" = {token_id}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerUnderTest]:
    tmp = tmp_path_factory.mktemp("fuzz")
    script = tmp / "script.json"
    script.write_text('{"rules": [], "default": "Fine, thanks."}', encoding="utf-8")
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens: upstream tools fail at once
    env = {
        "LLM_PROVIDER": "scripted",
        "SCRIPTED_REPLIES": str(script),
        "RATE_LIMITS": GENEROUS,
        "WEATHER_URL": f"{closed}/weather",
        "GEOCODING_URL": f"{closed}/geo",
    }
    with running_server(tmp, env) as running:
        yield running


def schemathesis_command(server: ServerUnderTest, config: Path) -> list[str]:
    executable = Path(sys.executable).parent / "schemathesis"
    return [
        str(executable),
        "--config-file",
        str(config),
        "run",
        f"http://127.0.0.1:{server.port}/openapi.json",
        "-H",
        f"Authorization: Bearer {server.admin_token}",
        "--checks",
        CHECKS,
        "--max-response-time",
        str(MAX_RESPONSE_S),
        "--max-examples",
        str(EXAMPLES_PER_OPERATION),
        "--seed",
        str(SEED),
        "--workers",
        "2",
        "--request-timeout",
        "20",
        "--no-shrink",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--output-sanitize",
        "false",
    ]


def session_with_a_turn(server: ServerUnderTest) -> str:
    answer = requests.post(
        f"{server.base}/chat",
        json={"message": "hello"},
        timeout=20,
        headers={"Authorization": f"Bearer {server.admin_token}"},
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["session_id"])


def sacrificial_user(server: ServerUnderTest) -> tuple[int, int]:
    """A user and token for the admin and token endpoints' ids: the fuzzer disables, demotes and
    revokes those, never the admin and token it authenticates with."""
    made = requests.post(
        f"{server.base}/api/admin/users",
        json={"name": "fuzz-target", "token": True},
        timeout=20,
        headers={"Authorization": f"Bearer {server.admin_token}"},
    )
    assert made.status_code == 201, made.text
    user_id = made.json()["user"]["id"]
    listed = requests.get(
        f"{server.base}/api/admin/users/{user_id}/tokens",
        timeout=20,
        headers={"Authorization": f"Bearer {server.admin_token}"},
    )
    return int(user_id), int(listed.json()["tokens"][0]["id"])


def test_every_operation_passes_schemathesis(server: ServerUnderTest, tmp_path: Path) -> None:
    config = tmp_path / "schemathesis.toml"
    user_id, token_id = sacrificial_user(server)
    ids = REAL_SESSION.format(session_id=session_with_a_turn(server), user_id=user_id, token_id=token_id)
    config.write_text(CONFIGURED_OFF + ids, encoding="utf-8")
    document = requests.get(f"{server.base}/openapi.json", timeout=10).json()
    operations = (
        sum(len(item) for item in document["paths"].values()) - 1
    )  # Schemathesis leaves out the schema's own URL
    run = subprocess.run(
        schemathesis_command(server, config), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=tmp_path
    )
    report = run.stdout + run.stderr
    (tmp_path / "schemathesis.txt").write_text(report, encoding="utf-8")  # the whole report, kept by pytest's tmp_path
    assert f"Tested: {operations}" in report, report[-6000:]
    assert run.returncode == 0, failures_of(report)


def failures_of(report: str) -> str:
    """The report's FAILURES section (each case with its curl line) and its summary."""
    start = report.find("= FAILURES =")
    return report[start - 40 :] if start >= 0 else report[-20000:]


def test_a_keep_alive_connection_still_works_after_a_large_body(server: ServerUnderTest) -> None:
    """Found by the fuzzer: after a request whose body uvicorn reads in several parts, later
    requests on the same keep-alive connection ran inside that request's Flask app context
    (its `g`, its SQLite connection from another thread) and answered 500."""
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    with requests.Session() as connection:
        big = {"code": "0", "language": "c", "stdin": "a" * 100_000}
        connection.post(f"{server.base}/tools/run_code", json=big, headers=headers, timeout=20)
        with concurrent.futures.ThreadPoolExecutor(4) as others:  # other clients keep every worker thread in use
            noise = others.map(lambda _: requests.get(f"{server.base}/health", timeout=20).status_code, range(40))
            statuses = [
                connection.get(f"{server.base}/api/me", headers=headers, timeout=20).status_code for _ in range(30)
            ]
            list(noise)
    assert statuses == [200] * 30
