"""Real faults of the filesystem under a database, made from outside the server process.

Both hold for root too (the tests and CI run as root, which file modes do not stop):
- `read_only(paths)`: `chattr +i` makes the files immutable, so a new open for writing fails
  (SQLite then silently opens the database read-only) while descriptors opened before keep
  writing: exactly what a database made read-only for a while looks like to a running server.
- `small_filesystem(path, size_mb)` mounts a tmpfs of that size; `filled(directory)` writes a
  filler file until the filesystem has no byte left (ENOSPC) and deletes it afterwards.

Mounting needs CAP_SYS_ADMIN and `chattr` a filesystem with the immutable flag (ext4, tmpfs):
`require_fault_support()` fails a test where they should work (CI, root) and skips it elsewhere.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

_FILL_CHUNK = 64 * 1024


def fault_support_problem() -> str | None:
    """None when `mount -t tmpfs` and `chattr +i` both work here, else why not."""
    if shutil.which("chattr") is None:
        return "chattr is not installed (Debian package e2fsprogs)"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with small_filesystem(Path(tmp) / "mnt", 1) as mount:
                probe = mount / "probe"
                probe.write_bytes(b"x")
                with read_only([probe]):
                    pass
        except (OSError, subprocess.CalledProcessError) as error:
            return f"cannot mount a tmpfs or set the immutable flag here ({error}); run as root"
    return None


def require_fault_support() -> None:
    """For tests: fail when faults cannot be made although they should (CI, root), else skip."""
    import pytest

    problem = fault_support_problem()
    if problem is None:
        return
    if os.environ.get("CI") or os.geteuid() == 0:
        pytest.fail(problem)
    pytest.skip(problem)


@contextmanager
def small_filesystem(path: Path, size_mb: int) -> Iterator[Path]:
    """A tmpfs of `size_mb` mounted at `path` for the block (unmounted after, lazily if busy)."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(path)],
        check=True,
        capture_output=True,
    )
    try:
        yield path
    finally:
        _set_immutable(list(path.rglob("*")), False)
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@contextmanager
def read_only(paths: Iterable[Path]) -> Iterator[list[Path]]:
    """The existing `paths` immutable for the block (even root cannot open them for writing)."""
    present = [path for path in paths if path.exists()]
    _set_immutable(present, True)
    try:
        yield present
    finally:
        _set_immutable(present, False)


def database_files(database: Path) -> list[Path]:
    """The database file and its WAL companions (the ones that exist)."""
    return [path for path in (database, Path(f"{database}-wal"), Path(f"{database}-shm")) if path.exists()]


@contextmanager
def filled(directory: Path) -> Iterator[int]:
    """The filesystem of `directory` filled to the last byte for the block; yields the bytes written."""
    filler = directory / ".filler"
    written = 0
    try:
        with filler.open("wb", buffering=0) as handle:
            chunk = b"\0" * _FILL_CHUNK
            while True:
                try:
                    written += handle.write(chunk)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        break
                    chunk = chunk[: len(chunk) // 2]  # fill the last partial block too
        yield written
    finally:
        filler.unlink(missing_ok=True)


def _set_immutable(paths: list[Path], on: bool) -> None:
    if not paths:
        return
    flag = "+i" if on else "-i"
    subprocess.run(["chattr", flag, *map(str, paths)], check=on, capture_output=True)


def free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize
