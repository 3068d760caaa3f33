"""One single-use container and the steps (`docker exec`) run inside it.

A `Sandbox` is created from `container_options()` (every isolation setting of SPEC section 9
in one place: no network, read-only root, tmpfs `/work` and `/tmp` with size caps, user
65534, all capabilities dropped, `no-new-privileges`, docker-init as PID 1, memory limit equal
to memory+swap limit, pids limit, CPU quota, ulimits on file size, open files and core
dumps, labels for the reaper, never privileged, no mounts). Its main process is `sleep
infinity`; each step is an exec. The container serves one run and is then destroyed (killed
and removed).

Decisions:
- Every exec costs ~55 ms of engine time before its process starts (runc), most of a
  trivial run, so the files travel with the first step: its exec gets the tar on its stdin
  (the engine's archive upload refuses a read-only root) and runs
  `sh -c 'tar -x ... && printf MARK && exec "$@" < FILE'` as the sandbox user. The mark is
  written before the step's program starts, so stdout begins with it exactly when the files
  were unpacked and the program ran; a program cannot forge its absence. It is stripped;
  without it the step raises `UnpackError` (nothing of the user's ran).
- stdin is a file in the archive and the step runs as `sh -c 'exec "$@" < FILE'`: no
  attached stdin socket to write while reading, nothing to deadlock, and a step with
  10 MB of input costs the same as one without.
- The deadline is enforced here: a thread reads the exec's multiplexed stream into two
  buffers while the caller waits on an event with a timeout. At the deadline, or when a
  stream passes its cap (the partial output is kept), the whole container is killed: the
  only way to stop an exec and everything it forked. A killed sandbox runs no further step.
- The exit code comes from one `exec_inspect` once the stream has ended (the engine reports
  the exec as exited by then; a short bounded retry covers the rare moment it does not). A
  process that died of SIGKILL (137) counts as out of memory only with evidence: the
  cgroup's `oom_kill` counter (read by one more exec, v1 `memory.oom_control` or v2
  `memory.events`) went up, or the container was OOM-killed.
- A background child that inherited stdout keeps the stream open after the step's process
  exits (Docker itself gives up after ~2 s), so while the stream stays open the step polls
  the exec's state every 0.25 s (a step whose stream ends is never held up by the poll);
  once the process has exited the output is read for 0.2 s more and the stream is closed.
  The child lives on until the sandbox is destroyed.
- The container has no working directory of its own (each exec sets `/work`): with one, the
  engine creates `/work` in the root first and the tmpfs inherits its 0755 root-owned mode.
- No `nproc` ulimit: RLIMIT_NPROC counts every process of uid 65534 on the host, across
  containers, so it would make parallel runs fail each other; the cgroup pids limit is the
  fork-bomb bound.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import docker
from docker.types import Ulimit
from docker.utils.socket import frames_iter

from judge.models import Limits

LABEL = "orchestrator.judge"
RUN_LABEL = "orchestrator.judge.run"
POOL_LABEL = "orchestrator.judge.pool"
OWNER_LABEL = "orchestrator.judge.owner"  # the `Judge` that started it (tests check their own)
HOST_LABEL = "orchestrator.judge.host"  # the machine and process that started it: the reaper
PID_LABEL = "orchestrator.judge.pid"  # removes only containers whose process is gone
USER = "65534:65534"
WORKDIR = "/work"
_OOM_PROBE = (
    "sh",
    "-c",
    "cat /sys/fs/cgroup/memory.events 2>/dev/null || cat /sys/fs/cgroup/memory/memory.oom_control",
)
_UNPACKED = b"\x1ejudge:files-unpacked\x1e"  # first bytes of stdout of a step that unpacked the files
_UNTAR = f"tar -x -f - --no-same-owner -C {WORKDIR} && printf '\\036judge:files-unpacked\\036'"
_COPY_TIMEOUT_S = 30.0
_READ_CHUNK_WAIT_S = 5.0  # how long a killed step's reader may take to notice its stream closed
_POLL_S = 0.25  # how often a step whose stream stays open checks whether its process has exited
_EXITED_GRACE_S = 0.2  # output still read after the process exited
_EXIT_CODE_WAIT_S = 2.0  # bound on re-reading an exec the engine still reports as running
_EXIT_CODE_RETRY_S = 0.002


class SandboxError(Exception):
    """The Docker engine failed to create, feed or run a container; the verdict is internal_error."""


class UnpackError(SandboxError):
    """The files did not reach the sandbox, so none of the user's code ran (safe to retry elsewhere)."""


@dataclass(frozen=True)
class StepResult:
    """What one exec did; `killed` means the sandbox was stopped and can run no further step."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    duration_ms: int
    timed_out: bool = False
    truncated: bool = False
    oom_killed: bool = False
    killed: bool = False


def container_options(image: str, limits: Limits, pooled: bool = False, owner: str = "") -> dict[str, Any]:
    """Keyword arguments of `containers.create` for one sandbox (all isolation lives here)."""
    file_size = limits.file_size_mb * 1024 * 1024
    return {
        "image": image,
        "command": ["sleep", "infinity"],
        "user": USER,
        "environment": {"HOME": WORKDIR, "LANG": "C.UTF-8", "TMPDIR": "/tmp"},
        "hostname": "judge",
        "network_mode": "none",
        "network_disabled": True,
        "read_only": True,
        "tmpfs": {
            WORKDIR: f"size={limits.tmpfs_mb}m,mode=1777,exec,nosuid,nodev",
            "/tmp": "size=8m,mode=1777,nosuid,nodev",
        },
        "shm_size": "4m",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "privileged": False,
        "init": True,
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "pids_limit": limits.pids,
        "nano_cpus": int(limits.cpus * 1e9),
        "ulimits": [
            Ulimit(name="fsize", soft=file_size, hard=file_size),
            Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "labels": {
            LABEL: "1", RUN_LABEL: uuid.uuid4().hex, POOL_LABEL: "1" if pooled else "0", OWNER_LABEL: owner,
            HOST_LABEL: socket.gethostname(), PID_LABEL: str(os.getpid()),
        },
        "log_config": {"type": "none", "config": {}},
        "stdin_open": False,
        "tty": False,
        "detach": True,
    }


class Sandbox:
    """A started single-use container; always end with `destroy()`."""

    def __init__(self, client: docker.DockerClient, container: Any, limits: Limits) -> None:
        self.client = client
        self.container = container
        self.limits = limits
        self.killed = False
        self._oom_kills = 0

    @classmethod
    def start(
        cls, client: docker.DockerClient, image: str, limits: Limits, pooled: bool = False, owner: str = ""
    ) -> Sandbox:
        container = None
        try:
            container = client.containers.create(**container_options(image, limits, pooled, owner))
            container.start()
        except docker.errors.DockerException as error:
            if container is not None:
                _remove(container)
            raise SandboxError(f"could not start a sandbox from {image}: {error}") from error
        return cls(client, container, limits)

    @property
    def id(self) -> str:
        return str(self.container.id)

    def exec(
        self,
        argv: list[str] | tuple[str, ...],
        timeout_s: float,
        stdin_file: str | None = None,
        files: bytes | None = None,
    ) -> StepResult:
        """Run one step with a wall-clock deadline and capped output streams.

        `files` (a tar from `judge/files.py`) is unpacked into /work first, in the same exec;
        raises `UnpackError` when that fails.
        """
        if self.killed:
            raise SandboxError("the sandbox was already stopped")
        command = _command(argv, stdin_file, files is not None)
        started = time.monotonic()
        if files is None:
            exec_id, stream, close = self._start_streaming(command)
        else:
            exec_id, stream, close = self._start_with_files(command, files)
        reader = _StreamReader(stream, self.limits.output_bytes, _UNPACKED if files is not None else b"")
        reader.thread.start()
        finished = self._wait(reader, exec_id, started + timeout_s)
        duration_ms = int((time.monotonic() - started) * 1000)
        if not finished or reader.overflow:
            close()  # first: an unread stream would hold the kill up (~10 s)
            self.kill()
            reader.thread.join(_READ_CHUNK_WAIT_S)
            if reader.expected:
                raise UnpackError("the files were not unpacked before the deadline")
            return StepResult(
                exit_code=None,
                stdout=bytes(reader.out[: self.limits.output_bytes]),
                stderr=bytes(reader.err[: self.limits.output_bytes]),
                duration_ms=duration_ms,
                timed_out=not finished,
                truncated=reader.overflow,
                killed=True,
            )
        ended = reader.done.is_set()  # else the process exited and a child of it still holds the stream
        close()
        reader.thread.join(_READ_CHUNK_WAIT_S)
        if reader.expected:
            message = (bytes(reader.out) + bytes(reader.err)).decode("utf-8", "replace")[:500]
            raise UnpackError(f"could not unpack the files: {reader.error or message}")
        if ended and reader.error is not None:
            raise SandboxError(f"lost the step's output stream: {reader.error}")
        exit_code = self._exit_code(exec_id)
        oom = exit_code == 137 and self._oom_happened()
        return StepResult(exit_code, bytes(reader.out), bytes(reader.err), duration_ms, oom_killed=oom)

    def _start_streaming(self, command: list[str]) -> tuple[str, Any, Any]:
        """(exec id, (stdout, stderr) chunks, close) of a step with no stdin."""
        api = self.client.api
        try:
            exec_id = api.exec_create(self.id, command, stdout=True, stderr=True, user=USER, workdir=WORKDIR)["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=True)
        except docker.errors.DockerException as error:
            raise SandboxError(f"could not start a step in the sandbox: {error}") from error
        return exec_id, stream, stream.close

    def _start_with_files(self, command: list[str], files: bytes) -> tuple[str, Any, Any]:
        """Like `_start_streaming`, with `files` sent on the exec's stdin (socket mode, as `put_archive`)."""
        api = self.client.api
        try:
            exec_id = api.exec_create(
                self.id, command, stdin=True, stdout=True, stderr=True, user=USER, workdir=WORKDIR
            )["Id"]
            sock = api.exec_start(exec_id, socket=True)
        except docker.errors.DockerException as error:
            raise UnpackError(f"could not copy the files into the sandbox: {error}") from error
        raw = getattr(sock, "_sock", sock)

        def close() -> None:
            try:
                raw.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in recv; close() alone may not
            except OSError:
                pass
            sock.close()

        try:
            raw.settimeout(_COPY_TIMEOUT_S)
            raw.sendall(files)
            raw.shutdown(socket.SHUT_WR)
            raw.settimeout(None)  # the step's deadline is enforced by `_wait`, not by the socket
        except OSError as error:  # e.g. a broken pipe: tar stopped reading (tmpfs full) or died
            close()
            raise UnpackError(f"could not unpack the files into the sandbox: {error}") from error
        chunks = ((data, None) if kind == 1 else (None, data) for kind, data in frames_iter(sock, tty=False))
        return exec_id, chunks, close

    def _wait(self, reader: _StreamReader, exec_id: str, deadline: float) -> bool:
        """Wait for the stream to end or the step's process to exit; False at the deadline.

        Polls the exec's state every `_POLL_S` while waiting, so a step whose process exited
        but left a child holding stdout ends after `_EXITED_GRACE_S`, not at the deadline.
        """
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if reader.done.wait(min(left, _POLL_S)):
                return True
            try:
                running = self.client.api.exec_inspect(exec_id).get("Running", True)
            except docker.errors.DockerException:
                running = True
            if not running:
                reader.done.wait(min(_EXITED_GRACE_S, max(0.0, deadline - time.monotonic())))
                return True

    def _exit_code(self, exec_id: str) -> int | None:
        """The exec's exit code, read once its stream has ended; None if it never shows one."""
        deadline = time.monotonic() + _EXIT_CODE_WAIT_S
        while True:
            try:
                info = self.client.api.exec_inspect(exec_id)
            except docker.errors.DockerException as error:
                raise SandboxError(f"could not read the step's exit code: {error}") from error
            if not info.get("Running") and info.get("ExitCode") is not None:
                return int(info["ExitCode"])
            if time.monotonic() >= deadline:
                return None
            time.sleep(_EXIT_CODE_RETRY_S)

    def _oom_happened(self) -> bool:
        """True when the cgroup OOM killer fired since the last check (or killed the container)."""
        try:
            self.container.reload()
            if self.container.attrs["State"].get("OOMKilled"):
                return True
            exec_id = self.client.api.exec_create(self.id, list(_OOM_PROBE), user=USER)["Id"]
            text = self.client.api.exec_start(exec_id).decode("utf-8", "replace")
        except docker.errors.DockerException:
            return False
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        count = int(match.group(1)) if match else 0
        fired, self._oom_kills = count > self._oom_kills, count
        return fired

    def kill(self) -> None:
        """Stop every process of the sandbox now; it can run no further step."""
        self.killed = True
        try:
            self.container.kill()
        except docker.errors.DockerException:
            pass  # already dead; `destroy` removes it

    def destroy(self) -> None:
        """Kill and remove the container; safe to call twice."""
        self.killed = True
        _remove(self.container)


def _command(argv: list[str] | tuple[str, ...], stdin_file: str | None, unpack: bool) -> list[str]:
    """The exec's argv: `argv` itself, or behind `sh -c` to redirect stdin and unpack the files first."""
    if not unpack and stdin_file is None:
        return list(argv)
    run = f'exec "$@" < {stdin_file or "/dev/null"}'
    return ["sh", "-c", f"{_UNTAR} && {run}" if unpack else run, "sh", *argv]


def _remove(container: Any) -> None:
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.DockerException:
        pass  # left for the reaper (judge/reaper.py), which removes every labelled container


class _StreamReader:
    """Reads an exec's (stdout, stderr) chunks into capped buffers on a daemon thread.

    `expected` is a prefix stdout must start with (the unpack mark); it is stripped once seen
    and stays non-empty if the stream shows something else or ends first.
    """

    def __init__(self, stream: Any, cap: int, expected: bytes = b"") -> None:
        self.stream = stream
        self.cap = cap
        self.expected = expected
        self.out = bytearray()
        self.err = bytearray()
        self.overflow = False
        self.error: Exception | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._pump, name="judge-exec-reader", daemon=True)

    def _pump(self) -> None:
        try:
            for out, err in self.stream:
                if out:
                    self.out += out
                    if self.expected and len(self.out) >= len(self.expected):
                        if not self.out.startswith(self.expected):
                            break  # not the mark: the unpack failed, nothing of the user's ran
                        del self.out[: len(self.expected)]
                        self.expected = b""
                if err:
                    self.err += err
                if len(self.out) > self.cap or len(self.err) > self.cap:
                    self.overflow = True
                    break
        except Exception as error:  # noqa: BLE001 - reported to the waiting caller
            self.error = error
        finally:
            self.done.set()
