"""A worker process: load its kind's modules, limit itself, then run jobs one at a time.

Started by `bounded.worker.Worker.start` as `python -I [-S] -c BOOT ROOT SPEC` with an empty
environment (no API keys reach it); SPEC is the JSON of its kind (`jobs.Kind.spec`). It:

1. imports the kind's modules and runs its warm-up (our code, whose cost is the same for
   every input), and only THEN sets `RLIMIT_AS` to what it maps now plus `memory_mb` (plus
   `HEADROOM_BYTES` above a soft limit, to answer after a MemoryError): the budget is what
   a job may add, and an import never counts against it;
2. per job, reads a header, sets the soft `RLIMIT_CPU` a few seconds past the job's budget
   (a backstop behind the server's kill at the wall deadline: even a worker the server
   failed to kill stops itself with SIGXCPU), and calls `function(args, inputs)`, where
   `inputs` (`Inputs`) iterates the job's input frames as the job asks for them;
3. answers in JSON, refusing an answer over the job's `output_bytes` (`too_large`); every
   failure of the job is a value (`memory`, `crashed`), never a dead pipe;
4. retires (answers, then exits) after a MemoryError, once its resident size grew past
   `retire_growth_mb`, or after `max_jobs` jobs, so a reused worker is always small and
   fresh; otherwise it skips what is left of the job's input and waits for the next one;
5. exits at end of stdin (the server is gone: a worker dies with its server) or after
   `IDLE_EXIT_S` without a job (a pool dropped without `close()`).
"""

from __future__ import annotations

import importlib
import io
import json
import os
import resource
import select
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from bounded.protocol import MAX_HEADER_BYTES, decode, encode, frame, read_frame, skip_frames, write_message

HEADROOM_BYTES = 16 * 1024 * 1024  # above the soft address-space limit: room to answer after a MemoryError
EXIT_NO_MEMORY = 3  # not even the answer could be written
IDLE_EXIT_S = 1200  # twice bounded.pool.IDLE_REUSE_S, so the two never race
_PAGE = os.sysconf("SC_PAGE_SIZE")


class Inputs:
    """What a job gets besides its args: its input frames (read from stdin one at a time as the
    job iterates them), the time it has left, and `started()` for a job with a set-up phase."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes], budget_s: float) -> None:
        self._stdin, self._stdout = stdin, stdout
        self._budget_s = budget_s  # the header's `seconds_left`: what the server will wait from now (or from started())
        self._deadline = time.monotonic() + budget_s
        self.finished = False

    def seconds_left(self) -> float:
        """Before the server kills this job (its wait for a worker is already taken off)."""
        return max(0.0, self._deadline - time.monotonic())

    def __iter__(self) -> Inputs:
        return self

    def __next__(self) -> bytes:
        if not self.finished:
            data = read_frame(self._stdin)
            if data is not None:
                return data
            self.finished = True
        raise StopIteration

    def started(self) -> None:
        """The trusted set-up is done and the untrusted part starts: the server's wall clock starts now."""
        write_message(self._stdout, {"phase": "started"})
        self._deadline = time.monotonic() + self._budget_s

    def skip_rest(self) -> None:
        if not self.finished:
            skip_frames(self._stdin)
            self.finished = True


class ExactReader(io.FileIO):
    """The job pipe without read-ahead: `read(n)` takes exactly `n` bytes off the descriptor
    (fewer only at end of file), so the bytes after a job's `END` stay in the pipe, where the
    idle `poll` sees them. A buffered reader (`sys.stdin.buffer`) fills 8 KiB at once: when the
    server had already sent the next job (it does as soon as the answer arrives, while this
    worker may still be skipping the last job's input), the read that found `END` took the next
    header too, and `poll` on the empty pipe then waited for a header already read: the next job
    on this worker timed out at its deadline (issue 24 item 11)."""

    def read(self, size: int | None = -1, /) -> bytes:
        if size is None or size < 0:
            return super().read() or b""
        parts = bytearray()
        while len(parts) < size:
            chunk = super().read(size - len(parts))
            if not chunk:
                break
            parts += chunk
        return bytes(parts)


def _statm() -> tuple[int, int]:
    """(virtual size, resident size) of this process, bytes."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        size, resident = handle.read().split()[:2]
    return int(size) * _PAGE, int(resident) * _PAGE


def load(modules: list[str], warm_up: str | None) -> None:
    for name in modules:
        importlib.import_module(name)
    if warm_up:
        lookup(warm_up, modules)()


def limit_memory(memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    ceiling = _statm()[0] + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling + HEADROOM_BYTES))


def use_headroom() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


def limit_cpu(budget_s: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(usage.ru_utime + usage.ru_stime + budget_s) + 1
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))


def lookup(name: str, modules: list[str]) -> Callable[..., Any]:
    """`module:function`, only from the modules this worker loaded before its limits."""
    module, _, attribute = name.partition(":")
    if module not in modules:
        raise LookupError(f"{module} is not loaded in this worker")
    found: Callable[..., Any] = getattr(sys.modules[module], attribute)
    return found


def _failure(kind: str, detail: str) -> dict[str, Any]:
    return {"ok": False, "kind": kind, "detail": detail[:500]}


def run_job(header: dict[str, Any], inputs: Inputs, modules: list[str]) -> tuple[dict[str, Any], bool]:
    """(answer, whether the job ran out of memory); never raises for what the job did."""
    try:
        return {"ok": True, "value": lookup(str(header["function"]), modules)(header["args"], inputs)}, False
    except MemoryError:
        return _failure("memory", "the job ran out of its memory budget"), True
    except RecursionError:
        return _failure("memory", "the input is nested too deeply"), False
    except Exception as error:
        return _failure("crashed", f"{type(error).__name__}: {error}"), False


def answer_bytes(answer: dict[str, Any], output_bytes: int) -> bytes:
    body = encode(answer)
    if len(body) > output_bytes:
        body = encode(
            {
                **_failure("too_large", f"the answer is {len(body)} bytes, over {output_bytes}"),
                "retire": answer.get("retire", False),
            }
        )
    return frame(body)


def serve(spec: dict[str, Any], stdin: IO[bytes], stdout: IO[bytes]) -> None:
    modules = list(spec["modules"])
    base_resident = _statm()[1]
    idle = select.poll()
    idle.register(stdin.fileno(), select.POLLIN)
    served = 0
    while True:
        if not idle.poll(IDLE_EXIT_S * 1000):
            return  # nobody has asked for a long time: a forgotten worker
        raw = read_frame(stdin, MAX_HEADER_BYTES)
        if raw is None:
            return  # the server closed the pipe
        header = decode(raw)
        served += 1
        limit_cpu(float(header["cpu_s"]))
        inputs = Inputs(stdin, stdout, float(header["seconds_left"]))
        answer, out_of_memory = run_job(header, inputs, modules)
        if out_of_memory:
            use_headroom()
        grown = _statm()[1] - base_resident > int(spec["retire_growth_mb"]) * 1024 * 1024
        answer["retire"] = retire = out_of_memory or grown or served >= int(spec["max_jobs"])
        try:
            data = answer_bytes(answer, int(header["output_bytes"]))
        except MemoryError:
            use_headroom()
            data = frame(encode({**_failure("memory", "the answer did not fit in the memory budget"), "retire": True}))
            retire = True
        stdout.write(data)
        stdout.flush()
        if retire:
            return
        inputs.skip_rest()


def main(argv: list[str]) -> None:
    spec = json.loads(argv[0])
    stdin, stdout = ExactReader(sys.stdin.fileno(), "rb", closefd=False), sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but frames may reach the server's pipe
    load(list(spec["modules"]), spec.get("warm_up"))
    limit_memory(int(spec["memory_mb"]) * 1024 * 1024)
    try:
        serve(spec, stdin, stdout)
    except MemoryError:
        os._exit(EXIT_NO_MEMORY)
    except OSError:
        pass  # the server is gone (a broken pipe)
    except ValueError:
        os._exit(2)  # a frame that breaks the protocol
    os._exit(0)
