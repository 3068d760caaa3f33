#!/usr/bin/env bash
# Sets up a fresh machine for this project: Debian packages, the venv, Python packages.
# Safe to run again: each step is skipped when already done (pip runs only when
# requirements.txt changed since the last successful install).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

log() { printf '\033[1m[setup]\033[0m %s\n' "$*"; }

# apt_install PKG...: install Debian packages that are not installed yet (needs root).
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  log "installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "setup: need root to install ${missing[*]}" >&2
    return 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

if ! "$PYTHON" -c "import venv, ensurepip" 2>/dev/null; then
  apt_install python3-venv
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment in $VENV"
  "$PYTHON" -m venv "$VENV"
fi

stamp="$VENV/.requirements.sha256"
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  log "installing Python packages from requirements.txt"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt
  echo "$want" > "$stamp"
else
  log "Python packages are up to date"
fi
log "done"
