"""What goes over the pipe between the server and a worker: jobs, answers, errors, frames.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON. The server sends
one job; the worker answers with `{"phase": "query"}` when the trusted set-up is done and the
untrusted statement starts (the server's deadline clock starts there), then with one reply:
`{"ok": true, "answer": …}` or `{"ok": false, "error": {"code", "message"}}`, plus `"retire":
true` when the worker is about to exit (it grew too large to be reused).

Everything here is plain frozen dataclasses and the standard library: the worker imports it.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO, Literal

HEADER = struct.Struct(">I")
MAX_JOB_BYTES = 16 * 1024 * 1024  # a task's setup script can be a few MB (task files are at most 5 MB)
MAX_REPLY_BYTES = 4 * 1024 * 1024  # answers are budgeted far below this; more means a broken worker

ErrorCode = Literal["VALIDATION_FAILED", "PERMISSION_DENIED", "TIMEOUT", "TOO_LARGE", "UNAVAILABLE"]


@dataclass(frozen=True)
class SqlError:
    """Why a job gave no answer, in words the model or the learner can act on."""

    code: ErrorCode
    message: str


def timeout_error(deadline_s: float) -> SqlError:
    """The one wording of a deadline, whether the worker stopped itself or was killed."""
    return SqlError("TIMEOUT", f"the query ran longer than {deadline_s:g} s and was stopped; add a LIMIT or simplify.")


@dataclass(frozen=True)
class MemoryJob:
    """`/memory_sql`: one statement over this user's views of the database file (read-only)."""

    database_path: str
    user_id: int
    sql: str
    deadline_s: float
    max_rows: int
    max_update_rows: int
    kind: Literal["memory"] = "memory"


@dataclass(frozen=True)
class SelectJob:
    """A task's `sql_result` check: the instructor's setup script, then one read-only SELECT."""

    setup_sql: str
    sql: str
    deadline_s: float
    max_rows: int
    kind: Literal["select"] = "select"


Job = MemoryJob | SelectJob


@dataclass(frozen=True)
class Change:
    """One memory an UPDATE would change, with the values it had when the worker read it."""

    id: int
    old_content: str
    old_importance: int
    content: str
    importance: int


@dataclass(frozen=True)
class MemoryAnswer:
    """A SELECT's bounded rows, or the changes an UPDATE would make (not yet written)."""

    kind: Literal["select", "update"]
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    truncated_by: Literal["rows", "bytes", ""] = ""
    changes: list[Change] = field(default_factory=list)


@dataclass(frozen=True)
class SelectAnswer:
    """A learner's result, exact (blobs as hex), for comparison with the expected rows."""

    columns: list[str]
    rows: list[list[Any]]


def job_to_dict(job: Job) -> dict[str, Any]:
    return asdict(job)


def job_from_dict(data: dict[str, Any]) -> Job:
    kind = data.get("kind")
    if kind == "memory":
        return MemoryJob(**data)
    if kind == "select":
        return SelectJob(**data)
    raise ValueError(f"unknown job kind {kind!r}")


def memory_answer_from_dict(data: dict[str, Any]) -> MemoryAnswer:
    changes = [Change(**change) for change in data.pop("changes", [])]
    return MemoryAnswer(**data, changes=changes)


def select_answer_from_dict(data: dict[str, Any]) -> SelectAnswer:
    return SelectAnswer(**data)


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")
    return HEADER.pack(len(body)) + body


def decode(body: bytes) -> dict[str, Any]:
    value = json.loads(body.decode("utf-8", "surrogatepass"))
    if not isinstance(value, dict):
        raise ValueError("a frame must hold a JSON object")
    return value


def read_frame(stream: BinaryIO, limit: int) -> dict[str, Any] | None:
    """One frame from a blocking stream (the worker's stdin); None at end of file."""
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (size,) = HEADER.unpack(header)
    if size > limit:
        raise ValueError(f"frame of {size} bytes is over the {limit} byte limit")
    body = stream.read(size)
    if len(body) < size:
        return None
    return decode(body)


def write_frame(stream: BinaryIO, message: dict[str, Any]) -> None:
    stream.write(encode(message))
    stream.flush()
