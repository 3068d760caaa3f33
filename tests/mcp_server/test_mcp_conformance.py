"""`/mcp` against the official MCP conformance suite (npm's `@modelcontextprotocol/conformance`),
software nobody here wrote, run on a real server process (SPEC 14).

The suite, and the Node.js 22 it needs, are pinned in `scripts/conformance/package.json` and
installed into `.cache/mcp-conformance/` by `scripts/services/mcp_conformance.sh` (run by
`scripts/setup.sh --test`; run here too when missing, a no-op once installed). The suite cannot
send a bearer token, so it talks to `tests/bearer_proxy.py`, which adds alice's; the server is
told the proxy's origin (`MCP_ALLOWED_ORIGINS`), as an operator behind a proxy would tell it.

Every server scenario of the suite is either in `APPLICABLE`, and must pass (no check failed,
at least one succeeded), or in `NOT_APPLICABLE` with the reason. Most that do not apply call
fixtures of the suite's own reference server (a tool named `test_simple_text`, a resource
`test://static-text`), which a product has no reason to serve. A scenario a new suite version
adds is in neither, and fails `test_every_scenario_of_the_suite_is_classified` until it is
placed. README's MCP server section has the table.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.bearer_proxy import bearer_proxy
from tests.mcp_support import mcp_server
from tests.process_support import ROOT, free_port

pytestmark = pytest.mark.slow

FOLDER = ROOT / ".cache" / "mcp-conformance"
INSTALLER = ROOT / "scripts" / "services" / "mcp_conformance.sh"
PINNED = json.loads((ROOT / "scripts" / "conformance" / "package.json").read_text())["dependencies"]
SUITE_VERSION = PINNED["@modelcontextprotocol/conformance"]

APPLICABLE = (
    "server-initialize",
    "ping",
    "tools-list",
    "logging-set-level",
    "dns-rebinding-protection",
    "resources-list",
    "prompts-list",
    "completion-complete",
)
FIXTURE_TOOL = "calls a fixture tool of the suite's reference server ({}); our tools are the product's"
FIXTURE_RESOURCE = "reads a fixture resource of the suite's reference server ({}); ours are memories and files"
FIXTURE_PROMPT = "gets a fixture prompt of the suite's reference server ({}); ours are the product's"
NOT_APPLICABLE: dict[str, str] = {
    "tools-call-simple-text": FIXTURE_TOOL.format("test_simple_text"),
    "tools-call-image": FIXTURE_TOOL.format("test_image_content"),
    "tools-call-audio": FIXTURE_TOOL.format("test_audio_content"),
    "tools-call-embedded-resource": FIXTURE_TOOL.format("test_embedded_resource"),
    "tools-call-mixed-content": FIXTURE_TOOL.format("test_multiple_content_types"),
    "tools-call-with-logging": FIXTURE_TOOL.format("test_tool_with_logging") + "; /mcp sends no log notifications",
    "tools-call-error": FIXTURE_TOOL.format("test_error_handling")
    + "; our error results are checked by the Inspector (test_mcp_inspector.py)",
    "tools-call-with-progress": FIXTURE_TOOL.format("test_tool_with_progress") + "; our tools send no progress",
    "tools-call-sampling": FIXTURE_TOOL.format("test_sampling") + "; no tool of ours asks the host's model",
    "tools-call-elicitation": FIXTURE_TOOL.format("test_elicitation") + "; no tool of ours asks the user",
    "elicitation-sep1034-defaults": FIXTURE_TOOL.format("test_elicitation_sep1034_defaults"),
    "elicitation-sep1330-enums": FIXTURE_TOOL.format("test_elicitation_sep1330_enums"),
    "json-schema-2020-12": FIXTURE_TOOL.format("json_schema_2020_12_tool")
    + "; our input schemas are the input models' (test_mcp_schemas.py)",
    "server-sse-polling": FIXTURE_TOOL.format("test_reconnection")
    + "; /mcp is stateless and answers JSON, never an SSE stream to resume",
    "server-sse-multiple-streams": "needs a session id; /mcp is stateless (any process of a cluster answers any "
    "request), so the suite only warns and checks nothing",
    "resources-read-text": FIXTURE_RESOURCE.format("test://static-text"),
    "resources-read-binary": FIXTURE_RESOURCE.format("test://static-binary"),
    "resources-templates-read": FIXTURE_RESOURCE.format("test://template/{id}/data"),
    "resources-subscribe": FIXTURE_RESOURCE.format("test://watched-resource")
    + "; a stateless server holds no subscriptions",
    "resources-unsubscribe": FIXTURE_RESOURCE.format("test://watched-resource")
    + "; a stateless server holds no subscriptions",
    "prompts-get-simple": FIXTURE_PROMPT.format("test_simple_prompt"),
    "prompts-get-with-args": FIXTURE_PROMPT.format("test_prompt_with_arguments"),
    "prompts-get-embedded-resource": FIXTURE_PROMPT.format("test_prompt_with_embedded_resource"),
    "prompts-get-with-image": FIXTURE_PROMPT.format("test_prompt_with_image"),
}
WRITTEN = {"path": "notes/plan.txt", "content": "step one\n"}
SCENARIO_LINE = re.compile(r"^\s+- (?P<name>[a-z0-9-]+) \[")


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the MCP conformance suite cannot run: {reason}")
    pytest.skip(f"MCP conformance suite unavailable: {reason}")


@dataclass(frozen=True)
class Suite:
    """The installed suite, run with the Node.js installed beside it (the system's may be older)."""

    node: Path
    cli: Path

    def run(self, *args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.node), str(self.cli), *args], capture_output=True, text=True, timeout=timeout_s, cwd=FOLDER
        )


@pytest.fixture(scope="module")
def suite() -> Suite:
    if shutil.which("npm") is None and not (FOLDER / "node_modules").is_dir():
        unavailable("npm is not on PATH")
    done = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        unavailable(f"{INSTALLER.name} failed: {done.stderr[-2000:]}")
    found = Suite(FOLDER / "node_modules" / ".bin" / "node", FOLDER / "node_modules" / ".bin" / "conformance")
    version = found.run("--version")
    assert version.stdout.strip() == SUITE_VERSION, version
    return found


@pytest.fixture(scope="module")
def mcp_url(suite: Suite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`/mcp` through the token-adding proxy."""
    port = free_port()
    origins = f"default,http://127.0.0.1:{port}"
    with (
        mcp_server(tmp_path_factory.mktemp("mcp-conformance"), MCP_ALLOWED_ORIGINS=origins) as server,
        bearer_proxy(server.base_url, server.alice, port) as proxy,
    ):
        auth = {"Authorization": f"Bearer {server.alice}"}  # something to list: a memory and a file
        for name, body in (("remember", {"fact": "alice drinks green tea"}), ("write_file", WRITTEN)):
            answer = requests.post(f"{server.base_url}/tools/{name}", json=body, headers=auth, timeout=30)
            assert answer.status_code == 200, answer.text
        yield f"{proxy}/mcp"


def server_scenarios(suite: Suite) -> list[str]:
    listed = suite.run("list", "--server")
    assert listed.returncode == 0, listed.stderr
    return [match["name"] for line in listed.stdout.splitlines() if (match := SCENARIO_LINE.match(line))]


def checks_of(output: Path) -> list[dict[str, Any]]:
    """Every check the suite recorded under `output` (one folder per scenario run)."""
    found: list[dict[str, Any]] = []
    for path in sorted(output.glob("*/checks.json")):
        found.extend(json.loads(path.read_text()))
    return found


def test_every_scenario_of_the_suite_is_classified(suite: Suite) -> None:
    assert set(APPLICABLE).isdisjoint(NOT_APPLICABLE)
    assert sorted(NOT_APPLICABLE) == sorted(set(server_scenarios(suite)) - set(APPLICABLE))
    assert set(APPLICABLE) <= set(server_scenarios(suite))


@pytest.mark.parametrize("scenario", APPLICABLE)
def test_an_applicable_scenario_passes(suite: Suite, mcp_url: str, scenario: str, tmp_path: Path) -> None:
    done = suite.run("server", "--url", mcp_url, "--scenario", scenario, "--output-dir", str(tmp_path))
    checks = checks_of(tmp_path)
    failed = [check for check in checks if check["status"] in ("FAILURE", "ERROR")]
    assert failed == [], json.dumps(failed, indent=2)[:4000]
    assert any(check["status"] == "SUCCESS" for check in checks), checks
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
