# Shared helpers of scripts/*.sh (sourced, not run). LOG_TAG names the calling script.

log() { printf '\033[1m[%s]\033[0m %s\n' "${LOG_TAG:-setup}" "$*"; }

# apt_install PKG...: install Debian packages that are not installed yet (needs root).
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  log "installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "${LOG_TAG:-setup}: need root to install ${missing[*]}" >&2
    return 1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# hold_service_starts: Debian's packages start their own service on install, but the tests
# start private servers instead; refuse those starts until the calling script exits (a
# policy-rc.d, only when none is set: Docker images ship one).
hold_service_starts() {
  if [ ! -e /usr/sbin/policy-rc.d ] && [ "$(id -u)" = 0 ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
}
