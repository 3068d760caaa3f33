#!/usr/bin/env bash
# Sets up a fresh machine for this project: Debian packages, the venv, Python packages,
# the web UI's browser libraries. Safe to run again: each step is skipped when already done
# (pip runs only when requirements.txt (or, with --test, requirements-test.txt) changed since the
# last successful install, npm only
# when web/package-lock.json did).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv

# shellcheck source=scripts/lib.sh
. scripts/lib.sh

if ! "$PYTHON" -c "import venv, ensurepip" 2>/dev/null; then
  apt_install python3-venv
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment in $VENV"
  "$PYTHON" -m venv "$VENV"
fi

# pip_install FILE: install FILE's pins unless they are what the last successful install of it
# installed (a stamp in the venv). requirements-test.txt is installed with requirements.txt as
# constraints, so a test tool never moves a pin the server runs with.
pip_install() {
  local file=$1 stamp want
  stamp="$VENV/.${file%.txt}.sha256"
  want=$(cat requirements.txt "$file" | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    log "installing Python packages from $file"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c requirements.txt -r "$file"
    echo "$want" > "$stamp"
  else
    log "Python packages of $file are up to date"
  fi
}
pip_install requirements.txt
# --test: also what the test suite and the benchmarks need (make test, make bench).
if [ "${1:-}" = "--test" ]; then
  pip_install requirements-test.txt
  # The MCP conformance suite and the Node.js 22 it runs on (tests/mcp_server/test_mcp_conformance.py).
  bash scripts/services/mcp_conformance.sh
fi

# Browser libraries of the web UI (marked, DOMPurify, highlight.js, KaTeX; axe-core is read by the
# browser tests from web/node_modules), pinned by
# web/package-lock.json; npm runs only when the lock changed. Their browser builds are
# copied to static/vendor/ (not committed), which the page loads from this server.
web_stamp=web/node_modules/.lock.sha256
want=$(sha256sum web/package-lock.json | cut -d' ' -f1)
if [ ! -f "$web_stamp" ] || [ "$(cat "$web_stamp")" != "$want" ] || [ ! -f static/vendor/purify.es.js ] \
  || ! grep -q "loading KaTeX lazily" static/vendor/katex/marked-katex.js 2>/dev/null; then
  command -v npm >/dev/null || apt_install npm
  log "installing the web UI's browser libraries (npm ci in web/)"
  (cd web && npm ci --silent --no-audit --no-fund)
  mkdir -p static/vendor
  cp web/node_modules/marked/lib/marked.esm.js static/vendor/marked.esm.js
  cp web/node_modules/dompurify/dist/purify.es.mjs static/vendor/purify.es.js
  cp web/node_modules/@highlightjs/cdn-assets/es/highlight.min.js static/vendor/highlight.min.js
  cp web/node_modules/@highlightjs/cdn-assets/styles/github.min.css static/vendor/highlight-github.css
  # KaTeX (math) and marked's KaTeX extension, whose tokenizer is all the page uses from it: its
  # KaTeX import is dropped (math.js renders and loads KaTeX on the first formula).
  mkdir -p static/vendor/katex
  cp web/node_modules/katex/dist/katex.mjs static/vendor/katex/katex.mjs
  cp web/node_modules/katex/dist/katex.min.css static/vendor/katex/katex.min.css
  cp -r web/node_modules/katex/dist/fonts static/vendor/katex/
  sed "s#^import katex from 'katex';#const katex = null; // static/js/math.js renders, loading KaTeX lazily#" \
    web/node_modules/marked-katex-extension/lib/index.esm.js > static/vendor/katex/marked-katex.js
  echo "$want" > "$web_stamp"
else
  log "web UI libraries are up to date"
fi

# The web UI's modules bundled into static/dist/ (esbuild, web/bundle.mjs; not committed): a
# fraction of a second. api/ui.py serves the bundle only while it matches the modules.
node web/bundle.mjs
log "done"
