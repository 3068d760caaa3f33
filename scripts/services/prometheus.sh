#!/usr/bin/env bash
# Prometheus for the /metrics tests (SPEC 16, tests/observe/test_prometheus.py): the tests write
# their own prometheus.yml and start a private server on loopback (tests/prometheus_support.py);
# this only makes sure the binary is installed. The package's own service is not started.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_TAG=prometheus
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
if [ -x /usr/bin/prometheus ]; then exit 0; fi
hold_service_starts
apt_install prometheus
