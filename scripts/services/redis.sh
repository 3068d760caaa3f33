#!/usr/bin/env bash
# redis-server for the REDIS_URL tests (SPEC 13): the tests start their own private server on
# loopback (tests/redis_support.py); this only makes sure the binary is installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_TAG=redis
. scripts/lib.sh
command -v redis-server >/dev/null 2>&1 || apt_install redis-server
