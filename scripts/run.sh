#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), then starts the server (HOST, PORT, LLM_* from
# the environment or .env). On first run the admin token is written to AUTH_TOKEN_FILE.
#
# The chat does not wait for the code judge: its images (minutes to build the first time) are
# built in the background by scripts/judge_images.sh, logged to DATA_DIR/judge-images/build.log;
# meanwhile the judge reports itself "preparing" (judge/preparing.py). JUDGE_WAIT=1 builds them
# first instead (as `make judge-images` does on its own). Where Docker cannot run, the build
# warns and the judge is reported unavailable (unless JUDGE_REQUIRED=1).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "${JUDGE_ENABLED:-1}" = 0 ]; then
  :  # no judge: nothing to build
elif [ "${JUDGE_WAIT:-0}" = 1 ]; then
  scripts/judge_images.sh
else
  build_dir="${DATA_DIR:-data}/judge-images"
  mkdir -p "$build_dir"
  # the build's own process id marks "preparing" from before the server starts (the script
  # writes it again and removes the marker when it ends, however it ends)
  setsid scripts/judge_images.sh >"$build_dir/build.log" 2>&1 </dev/null &
  echo "$!" >"$build_dir/building"
  echo "[run] the code judge's images are being built in the background (log: $build_dir/build.log)"
fi
exec .venv/bin/python app.py "$@"
