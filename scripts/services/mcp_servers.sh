#!/usr/bin/env bash
# Real MCP servers for the MCP client tests (tests/mcp_client/, SPEC 14): mcp-server-time and
# mcp-server-git from PyPI, pinned in requirements-mcp-servers.txt, in a venv of their own
# (.mcp-servers/, ignored by git) so their dependencies never fight ours. Reinstalled when that
# file changed since the last successful install (stamp in the venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_TAG=mcp-servers
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
stamp=.mcp-servers/.requirements.sha256
want=$(sha256sum requirements-mcp-servers.txt | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
log "installing the MCP servers of the tests (requirements-mcp-servers.txt) into .mcp-servers/"
[ -x .mcp-servers/bin/python ] || python3 -m venv .mcp-servers
.mcp-servers/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-mcp-servers.txt
echo "$want" > "$stamp"
