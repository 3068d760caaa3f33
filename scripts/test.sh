#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), then runs the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k purity.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mkdir -p test-artifacts
exec .venv/bin/python -m pytest -p no:cacheprovider --junitxml=test-artifacts/junit.xml "$@"
