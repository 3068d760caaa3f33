"""The child process of `bounded.worker`: limit itself, run one job, answer in JSON, exit.

Protocol (frames are a 4-byte big-endian length and that many bytes):
  stdin:  one header frame (JSON: `function` "module:name", `args`, `memory_bytes`,
          `cpu_s`, `output_bytes`), then any number of input frames until end of file;
  stdout: one JSON answer, `{"ok": true, "value": ...}` or
          `{"ok": false, "kind": "memory" | "crashed" | "too_large", "detail": "..."}`.

The job's module is imported BEFORE the memory limit is set (it is our code, and its import
cost is the same for every input); the limit then allows `memory_bytes` of address space
on top of what the process already maps, so the budget is what the untrusted input may
cost. The function is called as `function(args, frames)` and returns a JSON value.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import struct
import sys
from collections.abc import Iterator
from typing import IO

HEADROOM_BYTES = 16 * 1024 * 1024  # kept back to write the answer after a MemoryError
EXIT_NO_MEMORY = 3  # not even the answer could be written


def read_frame(stream: IO[bytes]) -> bytes | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    (length,) = struct.unpack(">I", head)
    data = stream.read(length)
    if len(data) < length:
        return None
    return data


def frames(stream: IO[bytes]) -> Iterator[bytes]:
    while (frame := read_frame(stream)) is not None:
        yield frame


def address_space_bytes() -> int:
    """What this process maps now (VmSize), from /proc."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmSize missing from /proc/self/status")


def limit(memory_bytes: int, cpu_s: int) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    ceiling = address_space_bytes() + memory_bytes
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling + HEADROOM_BYTES))


def answer(header: dict, stdin: IO[bytes]) -> dict:
    module, _, name = str(header["function"]).partition(":")
    function = getattr(importlib.import_module(module), name)
    limit(int(header["memory_bytes"]), int(header["cpu_s"]))
    try:
        return {"ok": True, "value": function(header["args"], frames(stdin))}
    except MemoryError:
        return {"ok": False, "kind": "memory", "detail": "the job ran out of its memory budget"}
    except RecursionError:
        return {"ok": False, "kind": "memory", "detail": "the input is nested too deeply"}
    except Exception as error:  # noqa: BLE001 - any failure of the job is reported as a value
        return {"ok": False, "kind": "crashed", "detail": f"{type(error).__name__}: {error}"[:500]}


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    raw = read_frame(stdin)
    if raw is None:
        os._exit(2)
    header = json.loads(raw)
    result = answer(header, stdin)
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (hard, hard))  # the headroom, to answer
        data = json.dumps(result).encode("ascii")  # escapes keep lone surrogates valid JSON
        if len(data) > int(header["output_bytes"]):
            data = json.dumps({"ok": False, "kind": "too_large", "detail": f"the answer is {len(data)} bytes"}).encode()
        stdout.write(data)
        stdout.flush()
    except MemoryError:
        os._exit(EXIT_NO_MEMORY)
    os._exit(0)


if __name__ == "__main__":
    main()
