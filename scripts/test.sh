#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), then runs the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k purity.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

# The browser tests drive Debian's chromium (tests/test_ui_browser.py); as root, install it
# when missing. Without it those tests fail under CI=true or BROWSER_REQUIRED=1, else skip.
LOG_TAG=test
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ]; then
  apt_install chromium
fi

# The Docker judge: engine (started when none answers) and images (built when missing).
# With JUDGE_REQUIRED=1 (CI) a machine that cannot run Docker fails here, not by skipping.
scripts/judge_images.sh

mkdir -p test-artifacts
exec .venv/bin/python -m pytest -p no:cacheprovider --junitxml=test-artifacts/junit.xml "$@"
