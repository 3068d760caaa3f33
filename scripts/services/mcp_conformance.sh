#!/usr/bin/env bash
# The official MCP conformance suite (npm's @modelcontextprotocol/conformance) for
# tests/mcp_server/test_mcp_conformance.py (SPEC 14), with the Node.js it needs (>= 22; Debian's
# is older): both pinned in scripts/conformance/package.json and its lock, installed with
# `npm ci` into .cache/mcp-conformance/ (ignored by git). Reinstalled when the lock changed since
# the last successful install (stamp in that folder). The npm package `node` ships the binary
# (its preinstall script fetches the platform's build from npm), so no apt repository is added.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_TAG=mcp-conformance
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
folder=.cache/mcp-conformance
stamp=$folder/.lock.sha256
want=$(cat scripts/conformance/package.json scripts/conformance/package-lock.json | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$folder/node_modules/.bin/node" ]; then exit 0; fi
command -v npm >/dev/null || apt_install npm
log "installing the MCP conformance suite and Node.js 22 (scripts/conformance/) into $folder/"
mkdir -p "$folder"
cp scripts/conformance/package.json scripts/conformance/package-lock.json "$folder/"
(cd "$folder" && npm ci --silent --no-audit --no-fund --engine-strict=false)
"$folder/node_modules/.bin/node" "$folder/node_modules/.bin/conformance" --version >/dev/null
echo "$want" > "$stamp"
