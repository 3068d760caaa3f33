#!/usr/bin/env bash
# The real Open WebUI in front of our /v1, end to end (scripts/openwebui_check.py says what is checked).
#
#   scripts/openwebui_check.sh                 # uses (or creates) $OPENWEBUI_VENV
#   OPENWEBUI_VENV=/opt/owui scripts/openwebui_check.sh --record tests/fixtures/openwebui
#
# OPENWEBUI_VENV: Open WebUI's own virtualenv, outside the repository (default ~/.cache/openwebui-venv).
# It is created when missing: `pip install open-webui==$OPENWEBUI_VERSION` needs Python 3.11 and
# about 7.4 GB of disk (torch, transformers, ...), which is why CI replays recorded requests
# instead (tests/api/test_openwebui_requests.py). Prints PASS or FAIL; exit code 0 or 1.
set -euo pipefail
cd "$(dirname "$0")/.."

OPENWEBUI_VENV="${OPENWEBUI_VENV:-$HOME/.cache/openwebui-venv}"
OPENWEBUI_VERSION="${OPENWEBUI_VERSION:-0.12.4}"
PYTHON_FOR_OPENWEBUI="${PYTHON_FOR_OPENWEBUI:-python3.11}"

if [ ! -x "$OPENWEBUI_VENV/bin/open-webui" ]; then
    echo "Open WebUI not found in $OPENWEBUI_VENV: installing open-webui==$OPENWEBUI_VERSION (several GB)..."
    start=$(date +%s)
    "$PYTHON_FOR_OPENWEBUI" -m venv "$OPENWEBUI_VENV"
    "$OPENWEBUI_VENV/bin/pip" install --quiet "open-webui==$OPENWEBUI_VERSION"
    echo "installed in $(( $(date +%s) - start )) s, $(du -sh "$OPENWEBUI_VENV" | cut -f1)"
fi
echo "Open WebUI $("$OPENWEBUI_VENV/bin/pip" show open-webui 2>/dev/null | sed -n 's/^Version: //p') in $OPENWEBUI_VENV"

[ -x .venv/bin/python ] || scripts/setup.sh
exec .venv/bin/python scripts/openwebui_check.py --venv "$OPENWEBUI_VENV" "$@"
