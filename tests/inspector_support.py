"""The MCP Inspector's CLI (`@modelcontextprotocol/inspector` from npm), installed on first use.

It is installed, pinned, into `.cache/mcp-inspector/` (gitignored) with npm's own client, once:
later runs find it there. Without node and npm the tests that need it skip, except in CI
(`CI=true`), where they fail: CI has node, so a missing one is a broken set-up, not a reason.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.process_support import ROOT

INSPECTOR_VERSION = "2.12.0"  # `mcp-inspector --cli`: --transport http, --header, --method, --tool-arg
PACKAGE = f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"
FOLDER = ROOT / ".cache" / "mcp-inspector"


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the MCP Inspector cannot run: {reason}")
    pytest.skip(f"MCP Inspector unavailable: {reason}")


def installed_version() -> str | None:
    manifest = FOLDER / "node_modules" / "@modelcontextprotocol" / "inspector" / "package.json"
    if not manifest.is_file():
        return None
    version: str = json.loads(manifest.read_text())["version"]
    return version


def inspector() -> Path:
    """The Inspector's launcher, installed when missing (or skip/fail without node and npm)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            unavailable(f"{tool} is not on PATH")
    launcher = FOLDER / "node_modules" / ".bin" / "mcp-inspector"
    if installed_version() != INSPECTOR_VERSION or not launcher.exists():
        FOLDER.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--prefix", str(FOLDER), "--no-audit", "--no-fund", "--ignore-scripts", PACKAGE],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            unavailable(f"npm install {PACKAGE} failed: {done.stderr[-2000:]}")
    return launcher


def run_cli(url: str, token: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`mcp-inspector --cli URL --transport http --header "Authorization: Bearer …" ARGS`.

    `HOME` is the test's own: the Inspector keeps a catalog and stored OAuth state there.
    `--stored-auth-only` makes a refused token an error instead of an interactive OAuth login."""
    command = [
        str(inspector()),
        "--cli",
        url,
        "--transport",
        "http",
        "--header",
        f"Authorization: Bearer {token}",
        "--stored-auth-only",
        *args,
    ]
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
