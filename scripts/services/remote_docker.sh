#!/usr/bin/env bash
# A second Docker engine for the remote-judge tests (SPEC 13, tests/test_judge_remote.py): the
# tests start their own private dockerd on tcp://127.0.0.1 with --tlsverify (own data root, exec
# root and containerd, certificates made with openssl; tests/remote_docker_support.py) and copy
# the judge images into it from the local engine, which scripts/judge_images.sh prepares (it runs
# before this script in scripts/test.sh). This only makes sure the binaries are there: docker.io
# (dockerd, containerd, the docker CLI) and openssl. Idempotent: a no-op when installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_TAG=remote-docker
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
if command -v dockerd >/dev/null && command -v containerd >/dev/null && command -v docker >/dev/null \
    && command -v openssl >/dev/null; then
  exit 0
fi
apt_install docker.io openssl
