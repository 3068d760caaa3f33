# The judge's launcher: the main process of every sandbox (under docker-init), run by `sh`
# (dash, in every judge image) as `sh -c "$LAUNCHER" judge-launcher`. It replaces one
# `docker exec` per step (~55 ms of runc each) with a fork inside the container (~1 ms).
#
# Its argument is IDLE_S (below). Protocol (judge/sandbox.py is the other side), one step at a
# time on the attached stdin:
#   request:  one line of shell words `NONCE SIZE INPUT_SIZE LIFETIME ARGV...` (quoted by the backend),
#             then SIZE bytes of tar to unpack into /work first (0: no files), then
#             INPUT_SIZE bytes: the program's stdin (0: /dev/null).
#   answer:   the program writes straight to the container's stdout and stderr; the
#             launcher adds marks `\036NONCE WORDS\036` on stdout:
#               `files`                   the files were unpacked, the program starts now
#               `unpack-failed`           tar failed; the launcher exits (its stdin is out of step)
#               `exit STATUS OOM_KILLS`   the program ended (128+N: killed by signal N);
#                                         OOM_KILLS is the cgroup's oom_kill counter
#             and, last, `\036NONCE\036` on stderr, so the backend knows both streams (two
#             pipes, copied separately by the engine) hold everything written before the end.
# The program's stdin is a pipe that carries its own input and nothing else (`head -c`
# copies exactly INPUT_SIZE bytes from the request; what the program leaves unread is
# drained after it, so the next request stays in step): a test's input exists in the
# sandbox only while that test runs, never as a file another test could list or read.
# When the program ends, every other process of the sandbox user is killed (`kill -KILL -1`
# spares the launcher itself and docker-init), so nothing a step left behind sees the next
# step's request. Variables are not exported, so the nonce is not in the program's
# environment. Nothing but builtins runs between steps apart from `head | tar` for the
# files, `head` and `cat` around the input, the program itself, and the watchdog.
#
# The container's own wall-clock limit, which holds when the server that should kill it is
# gone (killed with -9, its host lost): a watchdog (`sleep`, then kill the launcher; docker-init
# then exits and the container stops) is armed for LIFETIME seconds while a step runs (the
# step's deadline plus a margin, so the server's own kill comes first) and for IDLE_S seconds
# while the launcher waits for a request (a pooled container, or between tests). Re-arming
# kills the previous watchdog with `kill -KILL -1`, at points where nothing else of the sandbox
# user runs (before a step starts, after its leftovers were killed).

cd /work || exit 1
idle_s=$1
exec 3<&0  # the requests, for `head` in a background list (whose stdin the shell sets to /dev/null)

read_oom_kills() {
  oom_kills=0
  for file in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
    [ -r "$file" ] || continue
    while read -r key value; do
      [ "$key" = oom_kill ] && oom_kills=$value
    done <"$file"
    return
  done
}

arm() {
  kill -KILL -1 2>/dev/null
  { sleep "$1" && kill -KILL $$; } </dev/null >/dev/null 2>&1 3<&- &
}

arm "$idle_s"
while IFS= read -r request; do
  set -f
  eval "set -- $request"
  set +f
  nonce=$1 size=$2 input_size=$3
  arm "$4"
  shift 4
  if [ "$size" -gt 0 ]; then
    if head -c "$size" | tar -x -f - --no-same-owner -C /work; then
      printf '\036%s files\036' "$nonce"
    else
      printf '\036%s unpack-failed\036' "$nonce"
      printf '\036%s\036' "$nonce" >&2
      exit 1
    fi
  fi
  if [ "$input_size" -gt 0 ]; then
    head -c "$input_size" <&3 | { "$@" 3<&-; status=$?; cat >/dev/null; exit $status; } &
  else
    "$@" </dev/null 3<&- &
  fi
  wait $!
  status=$?
  kill -KILL -1 2>/dev/null
  read_oom_kills
  printf '\036%s exit %s %s\036' "$nonce" "$status" "$oom_kills"
  printf '\036%s\036' "$nonce" >&2
  arm "$idle_s"
done
