"""One single-use container and the steps run inside it by its launcher, without `docker exec`.

A `Sandbox` is created from `container_options()` (every isolation setting of SPEC section 9
in one place: no network, read-only root, tmpfs `/work` and `/tmp` with size caps, user
65534, all capabilities dropped, `no-new-privileges`, docker-init as PID 1, memory limit equal
to memory+swap limit, pids limit, CPU quota, ulimits on file size, open files and core
dumps, labels for the reaper, never privileged, no mounts). Its main process is the
launcher (`judge/launcher.sh`), which takes one step at a time on the container's attached
stdin and runs it as a child. The container serves one run and is then destroyed.

Decisions:
- No `docker exec`: every exec costs a runc start before its process starts, most of a
  trivial run, and reading its exit code and OOM state cost more round trips. The launcher
  forks instead and reports the exit status and the cgroup's `oom_kill` counter itself, so
  a pooled run is one write to the attach connection and one read of the answer (figures in
  `bench/README.md`, "The judge's costs").
- The connection is attached before the container starts and kept for its whole life; the
  files travel with the first step (tar after the request line; the engine's archive upload
  refuses a read-only root). The launcher's marks carry a fresh random nonce per step, so a
  program cannot end its step early by printing a mark, and its stdin is never the
  launcher's stdin.
- Each step's input travels with that step's request and reaches the program as a pipe
  (never a file in the sandbox): a test's program cannot list or read another test's input,
  which is not in the sandbox until that test runs; expected outputs never enter it at all.
  When a step's program ends, the launcher kills every other process of the sandbox user,
  so nothing left behind by one test watches the next one's input arrive. What a program could still do with the same uid (kill the launcher,
  read the nonce from its memory) ends or shortens its own run and grants nothing it could
  not do by exiting: the deadline, the output caps and the comparison stay on this side.
- The deadline is enforced here: a thread reads the stream into two capped buffers while the
  caller waits on an event with a timeout. At the deadline, or when a stream passes its cap
  (the partial output is kept), the whole container is killed, after shutting the
  connection (an unread stream would hold the kill up). A killed sandbox runs no further
  step.
- A process that died of SIGKILL (137) counts as out of memory only with evidence: the
  cgroup's `oom_kill` counter went up during the step, or the container itself was
  OOM-killed (the stream ended without marks).
- A background child that inherited stdout does not hold the step up: the step ends when the
  launcher reaps the program it started, and the launcher then kills the child; what it
  wrote before belongs to the step. What a program keeps in files (/work, /tmp) stays for
  the next test of the same submission (compile once, SPEC 9): it can remember inputs it was
  given, but never see one before its own test runs.
- The container has no working directory of its own (the launcher `cd`s to `/work`): with
  one, the engine creates `/work` in the root first and the tmpfs inherits its 0755
  root-owned mode.
- Every container also has its own wall-clock limit, enforced inside it by the launcher's
  watchdog, so it stops even when the server that should kill it died (kill -9, a lost
  host) before its `finally` ran: a step's lifetime is its deadline plus `LIFETIME_MARGIN_S`
  (the server's kill comes first while the server lives), and a launcher waiting for a
  request (pooled, or between tests) ends after `IDLE_S`. A stopped container holds no
  process or memory; its record is removed by the reaper at the next start-up. A pooled
  sandbox that ended itself is replaced when taken (judge/service.py). A program that kills
  the watchdog during its own step (same uid) escapes only this limit, and only while the
  server is gone too.
- No `nproc` ulimit: RLIMIT_NPROC counts every process of uid 65534 on the host, across
  containers, so it would make parallel runs fail each other; the cgroup pids limit is the
  fork-bomb bound.
"""

from __future__ import annotations

import math
import os
import secrets
import shlex
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.types import Ulimit

from judge.cleanup import Cleanup
from judge.engine import ENGINE_ERRORS, short_error
from judge.models import Limits
from judge.step_stream import FrameReader, StepReader, raw_socket

LABEL = "orchestrator.judge"
RUN_LABEL = "orchestrator.judge.run"
POOL_LABEL = "orchestrator.judge.pool"
OWNER_LABEL = "orchestrator.judge.owner"  # the `Judge` that started it (tests check their own)
HOST_LABEL = "orchestrator.judge.host"  # the machine and process that started it: the reaper
PID_LABEL = "orchestrator.judge.pid"  # removes only containers whose process is gone
USER = "65534:65534"
WORKDIR = "/work"
LAUNCHER = Path(__file__).with_name("launcher.sh").read_text(encoding="utf-8")
_ATTACH = {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
_JOIN_S = 5.0  # how long a stopped step's reader may take to notice its stream closed
IDLE_S = 600  # a launcher waiting this long for a request ends its container (a pool idles this long)
LIFETIME_MARGIN_S = 10  # a step's own limit beyond its deadline: the server's kill, slow engine included, comes first


class SandboxError(Exception):
    """The Docker engine failed to create, feed or run a container; the verdict is internal_error."""


class UnpackError(SandboxError):
    """The files did not reach the sandbox, so none of the user's code ran (safe to retry elsewhere)."""


class EngineGone(SandboxError):
    """The engine stopped answering during a step (its host went away or hangs); the verdict is internal_error."""


@dataclass(frozen=True)
class StepResult:
    """What one step did; `killed` means the sandbox was stopped and can run no further step."""

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    duration_ms: int
    timed_out: bool = False
    truncated: bool = False
    oom_killed: bool = False
    killed: bool = False


def container_options(
    image: str, limits: Limits, pooled: bool = False, owner: str = "", idle_s: int = IDLE_S
) -> dict[str, Any]:
    """Keyword arguments of `containers.create` for one sandbox (all isolation lives here)."""
    file_size = limits.file_size_mb * 1024 * 1024
    return {
        "image": image,
        "command": ["sh", "-c", LAUNCHER, "judge-launcher", str(idle_s)],
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
            LABEL: "1",
            RUN_LABEL: uuid.uuid4().hex,
            POOL_LABEL: "1" if pooled else "0",
            OWNER_LABEL: owner,
            HOST_LABEL: socket.gethostname(),
            PID_LABEL: str(os.getpid()),
        },
        "log_config": {"type": "none", "config": {}},
        "stdin_open": True,  # the launcher's requests
        "tty": False,  # stdout and stderr stay apart (multiplexed frames)
        "detach": True,
    }


class Sandbox:
    """A started single-use container with its attached launcher; always end with `destroy()`.

    `cleanup` (default: one on `client`) carries the calls that must not wait long on an engine
    that hangs: kill, inspect after a stop, remove (`judge/cleanup.py`). The judge gives every
    sandbox its own, on a client with a short timeout, which also remembers removals owed.
    """

    def __init__(
        self,
        client: docker.DockerClient,
        container: Any,
        attached: Any,
        limits: Limits,
        cleanup: Cleanup | None = None,
    ) -> None:
        self.client = client
        self.cleanup = cleanup or Cleanup(client)
        self.container = container
        self.limits = limits
        self.killed = False
        self._attached = attached  # keeps the connection (and the response owning it) alive
        self._socket = raw_socket(attached)
        self._frames = FrameReader(self._socket)
        self._oom_kills = 0

    @classmethod
    def start(
        cls,
        client: docker.DockerClient,
        image: str,
        limits: Limits,
        pooled: bool = False,
        owner: str = "",
        cleanup: Cleanup | None = None,
        idle_s: int = IDLE_S,
    ) -> Sandbox:
        container = None
        try:
            container = client.containers.create(**container_options(image, limits, pooled, owner, idle_s))
            attached = client.api.attach_socket(container.id, params=_ATTACH)  # before start: nothing missed
            container.start()
        except ENGINE_ERRORS as error:
            if container is not None:
                (cleanup or Cleanup(client)).remove(str(container.id))
            raise SandboxError(f"could not start a sandbox from {image}: {short_error(error)}") from error
        return cls(client, container, attached, limits, cleanup)

    @property
    def id(self) -> str:
        return str(self.container.id)

    def run_step(
        self,
        argv: list[str] | tuple[str, ...],
        timeout_s: float,
        stdin: bytes = b"",
        files: bytes | None = None,
    ) -> StepResult:
        """Run one step with a wall-clock deadline and capped output streams.

        `files` (a tar from `judge/files.py`) is unpacked into /work first, by the same
        request; raises `UnpackError` when that fails. `stdin` is this step's input only.
        """
        if self.killed:
            raise SandboxError("the sandbox was already stopped")
        nonce = secrets.token_hex(8)
        cap = self.limits.output_bytes
        reader = StepReader(self._frames, nonce, cap)
        started = time.monotonic()
        reader.start()
        lifetime_s = math.ceil(timeout_s) + LIFETIME_MARGIN_S
        sender = _Sender(self._socket, _request(nonce, argv, stdin, files or b"", lifetime_s))
        finished = reader.done.wait(timeout_s)
        duration_ms = int((time.monotonic() - started) * 1000)
        if not finished or reader.overflow:
            if not self._kill():
                reader.thread.join(_JOIN_S)
                raise EngineGone("the judge's Docker engine did not answer when the step had to be stopped")
            reader.thread.join(_JOIN_S)
            if files is not None and not reader.unpacked:
                raise UnpackError("the files were not unpacked before the deadline")
            return StepResult(
                exit_code=None,
                stdout=bytes(reader.out[:cap]),
                stderr=bytes(reader.err[:cap]),
                duration_ms=duration_ms,
                timed_out=not finished,
                truncated=reader.overflow,
                killed=True,
            )
        if reader.unpack_failed:
            self.kill()
            message = (bytes(reader.out) + bytes(reader.err)).decode("utf-8", "replace").strip()[:500]
            raise UnpackError(f"could not unpack the files: {message or 'tar failed'}")
        if reader.exit_code is None:  # the stream ended without the marks: the container stopped
            return self._stopped(reader, sender, duration_ms, unpacking=files is not None)
        oom = reader.exit_code == 137 and reader.oom_kills > self._oom_kills
        self._oom_kills = max(self._oom_kills, reader.oom_kills)
        return StepResult(reader.exit_code, bytes(reader.out), bytes(reader.err), duration_ms, oom_killed=oom)

    def _stopped(self, reader: StepReader, sender: _Sender, duration_ms: int, unpacking: bool) -> StepResult:
        """The step of a container that stopped before answering: OOM-killed, else an error."""
        self.kill()
        if unpacking and not reader.unpacked:
            cause = sender.error or reader.error or "the container stopped"
            raise UnpackError(f"could not copy the files into the sandbox: {cause}")
        try:
            oom_killed = self.cleanup.oom_killed(self.id)
        except ENGINE_ERRORS as error:
            raise EngineGone(f"the judge's Docker engine went away during the step: {short_error(error)}") from error
        if oom_killed:
            return StepResult(137, bytes(reader.out), bytes(reader.err), duration_ms, oom_killed=True, killed=True)
        raise SandboxError("the sandbox stopped during the step (its launcher was killed, or the engine stopped it)")

    def kill(self) -> None:
        """Stop every process of the sandbox now; it can run no further step."""
        self._kill()

    def _kill(self) -> bool:
        """`kill`, False when the engine could not be asked (it went away or hangs): the container
        may still run there; `destroy` removes it, or owes the removal (judge/cleanup.py)."""
        self.killed = True
        _shut(self._socket)  # first: an unread stream would hold the kill up (~10 s)
        return self.cleanup.kill(self.id)

    def destroy(self) -> None:
        """Kill and remove the container; safe to call twice."""
        self.killed = True
        _shut(self._socket)
        self._attached.close()
        self.cleanup.remove(self.id)  # if the engine cannot be asked, the removal is owed (judge/cleanup.py)


class _Sender:
    """Writes one request to the launcher on a daemon thread, so a stuck write never outlives
    the step's deadline (killing the container ends it)."""

    def __init__(self, sock: socket.socket, request: bytes) -> None:
        self.error: OSError | None = None
        self._sock = sock
        self._request = request
        threading.Thread(target=self._send, name="judge-step-sender", daemon=True).start()

    def _send(self) -> None:
        try:
            self._sock.sendall(self._request)
        except OSError as error:
            self.error = error


def _request(nonce: str, argv: list[str] | tuple[str, ...], stdin: bytes, files: bytes, lifetime_s: int) -> bytes:
    """The launcher's request: a line of shell words, then the tar of `files` (if any), then
    the program's input; the container ends itself `lifetime_s` after it arrives."""
    words = [nonce, str(len(files)), str(len(stdin)), str(lifetime_s), *argv]
    if any("\n" in word for word in words):  # the request is one line
        raise SandboxError("a step's command cannot contain a newline")
    return (" ".join(shlex.quote(word) for word in words) + "\n").encode("utf-8") + files + stdin


def _shut(sock: socket.socket) -> None:
    """Shut the connection both ways; wakes a reader blocked in recv, which close() alone may not."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
