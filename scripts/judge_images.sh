#!/usr/bin/env bash
# Makes the Docker code judge usable on this machine: installs Debian's docker.io and
# mmdebstrap when missing (root), starts dockerd when no engine answers, and builds one image
# per recipe of judge/recipes.py (the one source of truth for recipes and tags) with
# `mmdebstrap ... | docker import`, since no image registry is reachable. An image is built
# only when its tag (a hash of its recipe) is missing; builds run two at a time.
#
# With DOCKER_HOST (and DOCKER_TLS_VERIFY, DOCKER_CERT_PATH) naming a remote judge host, the
# images are built here and imported straight into that engine (README: A remote judge host).
#
# When Docker cannot run here, this exits 1 if JUDGE_REQUIRED=1 (CI) and otherwise warns and
# exits 0, so the product still starts and reports the judge as unavailable.
# Environment: JUDGE_REQUIRED, JUDGE_MIRROR (Debian mirror), JUDGE_BUILD_JOBS (default 2),
# DOCKERD_LOG (default /tmp/dockerd.log).
set -euo pipefail
cd "$(dirname "$0")/.."

MIRROR=${JUDGE_MIRROR:-http://deb.debian.org/debian}
JOBS=${JUDGE_BUILD_JOBS:-2}
DOCKERD_LOG=${DOCKERD_LOG:-/tmp/dockerd.log}
LOG_DIR=${JUDGE_BUILD_LOG_DIR:-data/judge-images}
RECIPES="python3 judge/recipes.py"

LOG_TAG=judge-images
# shellcheck source=scripts/lib.sh
. scripts/lib.sh  # log, apt_install

# give_up MESSAGE: fail when the judge is required, otherwise warn and leave the judge off.
give_up() {
  if [ "${JUDGE_REQUIRED:-0}" = 1 ]; then
    echo "judge-images: $1 (JUDGE_REQUIRED=1, failing)" >&2
    exit 1
  fi
  echo "judge-images: WARNING: $1; the judge will report itself unavailable" >&2
  exit 0
}

start_dockerd() {
  docker info >/dev/null 2>&1 && return 0
  case "${DOCKER_HOST:-unix://}" in
    unix://*) ;;
    *) echo "judge-images: the engine at $DOCKER_HOST does not answer (a remote engine is not started from here)" >&2
       return 1 ;;
  esac
  [ "$(id -u)" = 0 ] || { echo "judge-images: no Docker engine answers and only root can start dockerd" >&2; return 1; }
  command -v dockerd >/dev/null || return 1
  log "starting dockerd (log: $DOCKERD_LOG)"
  nohup dockerd >"$DOCKERD_LOG" 2>&1 </dev/null &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && { log "dockerd is up"; return 0; }
    kill -0 $! 2>/dev/null || break
    sleep 0.5
  done
  echo "judge-images: dockerd exited or did not answer within 30 s; last lines of $DOCKERD_LOG:" >&2
  tail -n 20 "$DOCKERD_LOG" >&2 || true
  return 1
}

# build NAME TAG: one image from its recipe; the import is tagged only if mmdebstrap succeeded.
build() {
  local name=$1 tag=$2 started=$SECONDS image_id args
  mapfile -t args < <($RECIPES args "$name" "$MIRROR")
  log "building $tag"
  if image_id=$(mmdebstrap "${args[@]}" 2>"$LOG_DIR/$name.log" | docker import - 2>>"$LOG_DIR/$name.log") \
      && [ -n "$image_id" ]; then
    docker tag "$image_id" "$tag"
    log "built $tag in $((SECONDS - started)) s ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%d MB", $1/1e6}'))"
  else
    [ -n "${image_id:-}" ] && docker rmi -f "$image_id" >/dev/null 2>&1
    echo "judge-images: building $tag failed; last lines of $LOG_DIR/$name.log:" >&2
    tail -n 20 "$LOG_DIR/$name.log" >&2
    return 1
  fi
}

# While this runs, DATA_DIR/judge-images/building holds its process id: the server reports the
# judge as "preparing" (judge/preparing.py) instead of unavailable. Removed however this ends.
MARKER_DIR="${DATA_DIR:-data}/judge-images"
mkdir -p "$MARKER_DIR"
echo "$$" >"$MARKER_DIR/building"
trap 'rm -f "$MARKER_DIR/building"' EXIT

apt_install docker.io mmdebstrap || give_up "could not install docker.io and mmdebstrap"
start_dockerd || give_up "no Docker engine could be started"
mkdir -p "$LOG_DIR"

failed=0
running=0
while read -r name tag; do
  if docker image inspect "$tag" >/dev/null 2>&1; then
    log "$tag is up to date"
    continue
  fi
  if ((running >= JOBS)); then
    wait -n || failed=1
    running=$((running - 1))
  fi
  build "$name" "$tag" &
  running=$((running + 1))
done < <($RECIPES tags)
while ((running > 0)); do
  wait -n || failed=1
  running=$((running - 1))
done
((failed == 0)) || give_up "some judge images could not be built"

# Drop images of older recipes (a recipe change gives a new tag); in-use ones stay.
while read -r name tag; do
  docker images --format '{{.Repository}}:{{.Tag}}' "${tag%%:*}" | grep -vxF "$tag" \
    | xargs -r docker rmi >/dev/null 2>&1 || true
done < <($RECIPES tags)
log "done"
