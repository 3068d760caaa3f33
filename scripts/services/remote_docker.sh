#!/usr/bin/env bash
# A second Docker engine for the remote-judge tests (SPEC 13, tests/judge/test_judge_remote.py): the
# tests start their own private dockerd on tcp://127.0.0.1 with --tlsverify (own data root, exec
# root and containerd, certificates made with openssl; tests/remote_docker_support.py), copy the
# judge images into it from the local engine (which scripts/judge_images.sh, run before this in
# scripts/test.sh, prepares), and a private sshd on loopback for DOCKER_HOST=ssh://. This only
# makes sure the binaries are there: docker.io (dockerd, containerd, the docker CLI), openssl and
# openssh-server (its own service is not started: a machine without a policy-rc.d gets one for
# the length of the install). Idempotent: a no-op when installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
LOG_TAG=remote-docker
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
if command -v dockerd >/dev/null && command -v containerd >/dev/null && command -v docker >/dev/null \
    && command -v openssl >/dev/null && command -v ssh-keygen >/dev/null && [ -x /usr/sbin/sshd ]; then
  exit 0
fi
hold_service_starts
apt_install docker.io openssl openssh-client openssh-server
