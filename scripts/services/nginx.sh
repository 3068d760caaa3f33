#!/usr/bin/env bash
# nginx for the several-processes tests (SPEC 13, tests/live/test_multiprocess.py): the tests write
# their own nginx.conf and start a private nginx on loopback (tests/nginx_support.py); this only
# makes sure the binary is installed. The package's own service is not started: a machine
# without a policy-rc.d gets one for the length of the install (Docker images ship one).
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_TAG=nginx
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
if [ -x /usr/sbin/nginx ]; then exit 0; fi
hold_service_starts
apt_install nginx
