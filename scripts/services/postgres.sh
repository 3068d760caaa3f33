#!/usr/bin/env bash
# PostgreSQL server binaries for the DATABASE_URL=postgresql://… tests (SPEC 13). The tests
# start their own private cluster (tests/pg_support.py: initdb in a temp dir, loopback port of
# 48000-48499); nothing here starts or configures a server. Idempotent: a no-op when installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_TAG=postgres
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
# the server binaries and `unaccent` (the search configuration's accent folding, contrib)
if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null \
  && compgen -G "/usr/share/postgresql/*/extension/unaccent.control" >/dev/null; then
  exit 0
fi
apt_install postgresql postgresql-contrib
