"""Submitted files -> an in-memory tar archive, unpacked into the container's `/work` by the first step.

The archive is built here, never by the engine from a host directory, so nothing on the host
is read and nothing can follow a symlink: every entry is a regular file (mode 0644) or a
directory (mode 0755) owned by the sandbox user, and every name is checked first. Names are
relative POSIX paths of plain components (no absolute paths, `..`, `.`, empty components,
backslashes, NUL or other control characters) under limits of depth, length, count and size.
Names under `.judge/` are reserved for the judge's own files (the SQL runner, compiled
programs). Names and contents must be valid Unicode: a lone surrogate (which a JSON `\ud800`
escape can put in a Python string) is refused, not silently replaced: a program changed on
the way would be judged for what the user did not write, and a name must be encoded for the
archive and the launcher script. Violations raise `SubmissionError`, whose
message says what to fix; endpoints map it to a 400 answer.
"""

from __future__ import annotations

import io
import tarfile
import time
from collections.abc import Mapping

from foundation.text_safety import has_surrogate

SANDBOX_UID = 65534
SANDBOX_GID = 65534
JUDGE_DIR = ".judge"

MAX_FILES = 64
MAX_DEPTH = 8
MAX_NAME_CHARS = 255
MAX_COMPONENT_CHARS = 100
MAX_FILE_BYTES = 512 * 1024
MAX_TOTAL_BYTES = 2 * 1024 * 1024
MAX_JUDGE_BYTES = 16 * 1024 * 1024  # the input of every test together (and the judge's own files)


class SubmissionError(Exception):
    """The submitted files cannot be judged; the message says why and what to change."""


def check_name(name: str) -> str:
    """Return `name` if it is a safe relative path inside `/work`, else raise `SubmissionError`."""
    if not name or len(name) > MAX_NAME_CHARS:
        raise SubmissionError(f"file name {name[:40]!r} must have 1 to {MAX_NAME_CHARS} characters")
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        raise SubmissionError(f"file name {name[:40]!r} contains a control character")
    if has_surrogate(name):
        raise SubmissionError(f"file name {name[:40]!r} contains a lone surrogate; use valid Unicode")
    if "\\" in name:
        raise SubmissionError(f"file name {name!r} contains a backslash; use '/' between folders")
    if name.startswith("/"):
        raise SubmissionError(f"file name {name!r} is absolute; give a path relative to the work folder")
    parts = name.split("/")
    if len(parts) > MAX_DEPTH:
        raise SubmissionError(f"file name {name!r} is nested deeper than {MAX_DEPTH} levels")
    for part in parts:
        if part in ("", ".", ".."):
            raise SubmissionError(f"file name {name!r} has an empty, '.' or '..' component")
        if len(part) > MAX_COMPONENT_CHARS:
            raise SubmissionError(f"file name {name!r} has a component longer than {MAX_COMPONENT_CHARS}")
    if parts[0] == JUDGE_DIR:
        raise SubmissionError(f"file name {name!r} is reserved for the judge; rename it")
    return name


def check_files(files: Mapping[str, str]) -> dict[str, bytes]:
    """Validate the user's files and encode them; raises `SubmissionError`."""
    if not files:
        raise SubmissionError("no files were submitted")
    if len(files) > MAX_FILES:
        raise SubmissionError(f"{len(files)} files submitted; at most {MAX_FILES} are allowed")
    encoded: dict[str, bytes] = {}
    total = 0
    for name, text in files.items():
        if has_surrogate(text):
            raise SubmissionError(f"file {name[:80]!r} contains a lone surrogate (\\ud800-\\udfff); send valid Unicode")
        data = text.encode("utf-8")
        if len(data) > MAX_FILE_BYTES:
            raise SubmissionError(
                f"file {name[:80]!r} is {len(data)} bytes; each file may have at most {MAX_FILE_BYTES} bytes"
            )
        total += len(data)
        encoded[check_name(name)] = data
    if total > MAX_TOTAL_BYTES:
        raise SubmissionError(f"the files total {total} bytes; at most {MAX_TOTAL_BYTES} are allowed")
    prefixes = {"/".join(name.split("/")[:i]) for name in encoded for i in range(1, name.count("/") + 1)}
    clashes = prefixes & set(encoded)
    if clashes:
        raise SubmissionError(f"{sorted(clashes)[0]!r} is both a file and a folder")
    return encoded


def build_archive(user_files: Mapping[str, bytes], judge_files: Mapping[str, bytes] | None = None) -> bytes:
    """A tar of checked user files plus the judge's own files under `.judge/` (always
    present: compilers write there; tests' inputs never go in, see `judge/service.py`)."""
    judge_files = judge_files or {}
    if sum(len(data) for data in judge_files.values()) > MAX_JUDGE_BYTES:
        raise SubmissionError(f"the judge's files total more than {MAX_JUDGE_BYTES} bytes")
    entries = dict(user_files)
    entries.update({f"{JUDGE_DIR}/{name}": data for name, data in judge_files.items()})
    folders = sorted(
        {JUDGE_DIR} | {"/".join(name.split("/")[:i]) for name in entries for i in range(1, name.count("/") + 1)}
    )
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in folders:
            tar.addfile(_info(folder, tarfile.DIRTYPE, 0o755, 0, now))
        for name, data in entries.items():
            tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(data), now), io.BytesIO(data))
    return buffer.getvalue()


def _info(name: str, kind: bytes, mode: int, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = mtime
    info.uid, info.gid = SANDBOX_UID, SANDBOX_GID
    info.uname = info.gname = "nobody"
    return info
