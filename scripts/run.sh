#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), then starts the server (HOST, PORT, LLM_* from
# the environment or .env). On first run the admin token is written to AUTH_TOKEN_FILE.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The Docker judge (engine and images); where Docker cannot run, this warns and the server
# starts anyway with the judge reported unavailable (unless JUDGE_REQUIRED=1).
scripts/judge_images.sh
exec .venv/bin/python app.py "$@"
