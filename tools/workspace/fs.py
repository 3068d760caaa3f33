"""Descriptor-relative file I/O inside a workspace, and the workspace caps.

Paths come from `paths.resolve_path`, which already refused links and special files; this
module re-checks at the moment of use so that a component swapped for a symlink between
the check and the I/O cannot redirect anything: every directory is opened with
`O_DIRECTORY | O_NOFOLLOW` relative to its parent's descriptor, files with `O_NOFOLLOW`
(and `O_NONBLOCK`, so a FIFO slipped in cannot block the open), and the type is checked
again with `fstat` on the open descriptor. Writes go to a temp file in the same directory
and are moved into place with `os.replace`, which replaces a name and never follows it.

The caps below are per user workspace, chosen so that a workspace stays small enough to
list and search within one tool deadline; a single file stays readable in a few calls.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tools.base import ErrorCode, ToolFailure
from tools.workspace.paths import MAX_DEPTH, SafePath, describe_mode

MAX_FILE_BYTES = 1_000_000  # one file, read or written
MAX_FILES = 500  # regular files in one workspace
MAX_TOTAL_BYTES = 20_000_000  # sum of file sizes in one workspace
MAX_WALK_ENTRIES = 5_000  # directory entries one listing/search looks at before stopping

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _kind_at(dir_fd: int, name: str) -> int | None:
    """`st_mode` of `name` in `dir_fd` without following a link; None when it is missing."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


def _refuse(shown: str, mode: int) -> ToolFailure:
    problem = describe_mode(mode)
    if problem is None:
        return ToolFailure(ErrorCode.VALIDATION_FAILED, f"{shown} is a file, not a directory; fix the path.")
    return ToolFailure(
        ErrorCode.PERMISSION_DENIED, f"{shown} is {problem}; only regular files and directories can be used."
    )


def _open_child_dir(dir_fd: int, name: str, shown: str, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise ToolFailure(
                ErrorCode.NOT_FOUND, f"directory {shown} does not exist; use /list_files to see what exists."
            ) from None
    except OSError:
        mode = _kind_at(dir_fd, name)
        if mode is None:
            raise ToolFailure(
                ErrorCode.NOT_FOUND, f"directory {shown} does not exist; use /list_files to see what exists."
            ) from None
        raise _refuse(shown, mode) from None
    try:
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    except FileExistsError:
        pass
    return _open_child_dir(dir_fd, name, shown, create=False)


@contextmanager
def open_dir(root: Path, parts: Sequence[str], *, create: bool = False) -> Iterator[int]:
    """A descriptor of `root/parts...`, reached one `O_NOFOLLOW` component at a time."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for index, part in enumerate(parts):
            child = _open_child_dir(fd, part, "/".join(parts[: index + 1]), create)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _missing(shown: str) -> ToolFailure:
    return ToolFailure(ErrorCode.NOT_FOUND, f"there is no file {shown}; use /list_files to see what exists.")


def _check_regular(shown: str, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED, f"{shown} is a directory; use /list_files {shown}/ to see its files."
        )
    if not stat.S_ISREG(mode):
        raise _refuse(shown, mode)


def read_bytes(target: SafePath, limit: int | None = None) -> bytes:
    """The content of a regular file, refusing links, special files and files over `limit`."""
    limit = MAX_FILE_BYTES if limit is None else limit
    shown = target.relative
    with open_dir(target.root, target.parts[:-1]) as dir_fd:
        leaf = target.parts[-1]
        mode = _kind_at(dir_fd, leaf)
        if mode is None:
            raise _missing(shown)
        _check_regular(shown, mode)  # before open: never open a device or FIFO at all
        try:
            fd = os.open(leaf, _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            raise _missing(shown) from None
        except OSError:
            raise ToolFailure(
                ErrorCode.PERMISSION_DENIED, f"{shown} was replaced while opening it; try again."
            ) from None
        try:
            info = os.fstat(fd)
            _check_regular(shown, info.st_mode)
            if info.st_size > limit:
                raise ToolFailure(
                    ErrorCode.VALIDATION_FAILED,
                    f"{shown} is {info.st_size} bytes, over the {limit} byte limit for one file; search it with /search_files instead.",
                )
            chunks, size = [], 0
            while size <= limit:
                chunk = os.read(fd, min(65536, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > limit:
                raise ToolFailure(
                    ErrorCode.VALIDATION_FAILED, f"{shown} grew over the {limit} byte limit while reading."
                )
            return b"".join(chunks)
        finally:
            os.close(fd)


def write_atomic(target: SafePath, data: bytes) -> bool:
    """Write `data` to `target` through a temp file and `os.replace`; True if it was created.

    Parent directories are created one `O_NOFOLLOW` step at a time. An existing target must
    be a regular file: a link, FIFO or device there is refused, never written through.
    """
    shown = target.relative
    with open_dir(target.root, target.parts[:-1], create=True) as dir_fd:
        leaf = target.parts[-1]
        before = _kind_at(dir_fd, leaf)
        if before is not None:
            _check_regular(shown, before)
        temp = f".{leaf[:64]}.{secrets.token_hex(6)}.tmp"
        fd = os.open(temp, _TEMP_FLAGS, 0o644, dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, leaf, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise
        return before is None


def decode_text(data: bytes) -> str | None:
    """The text of a file, or None when it is binary (a NUL byte or invalid UTF-8)."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int


@dataclass
class Walk:
    """Every regular file of a workspace (sorted), what was skipped, and whether it stopped early."""

    files: list[FileEntry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    truncated: bool = False

    @property
    def total_bytes(self) -> int:
        return sum(entry.size for entry in self.files)

    def size_of(self, path: str) -> int | None:
        return next((entry.size for entry in self.files if entry.path == path), None)


def walk_workspace(root: Path, check_time: Callable[[], object] | None = None) -> Walk:
    """List regular files below `root` without following any link.

    Links, FIFOs, sockets and devices are recorded in `skipped` and never opened; the walk
    looks at no more than MAX_WALK_ENTRIES entries and MAX_DEPTH levels. `check_time` is
    called once per directory (a handler passes `ctx.remaining`, which raises TIMEOUT).
    """
    walk = Walk()
    seen = 0
    stack: list[tuple[int, str, int]] = [(os.open(root, _DIR_FLAGS), "", 0)]
    try:
        while stack:
            dir_fd, prefix, depth = stack.pop()
            try:
                if check_time is not None:
                    check_time()
                with os.scandir(dir_fd) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > MAX_WALK_ENTRIES:
                            walk.truncated = True
                            break
                        rel = prefix + entry.name
                        mode = entry.stat(follow_symlinks=False).st_mode
                        if stat.S_ISREG(mode):
                            walk.files.append(FileEntry(rel, entry.stat(follow_symlinks=False).st_size))
                        elif stat.S_ISDIR(mode) and depth + 1 < MAX_DEPTH:
                            try:
                                stack.append((os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd), rel + "/", depth + 1))
                            except OSError:
                                walk.skipped.append(rel)
                        elif not stat.S_ISDIR(mode):
                            walk.skipped.append(rel)
            finally:
                os.close(dir_fd)
            if walk.truncated:
                break
    finally:
        for dir_fd, _, _ in stack:
            os.close(dir_fd)
    walk.files.sort(key=lambda entry: entry.path)
    walk.skipped.sort()
    return walk


def check_quota(
    walk: Walk, path: str, new_size: int, *, max_files: int = MAX_FILES, max_bytes: int = MAX_TOTAL_BYTES
) -> None:
    """Refuse a write of `new_size` bytes to `path` that would break a workspace cap.

    The caps are arguments (defaulting to this module's) so that a caller, or a test, can
    ask for other ones without changing the module for everybody."""
    if new_size > MAX_FILE_BYTES:
        raise ToolFailure(
            ErrorCode.VALIDATION_FAILED,
            f"the content is {new_size} bytes, over the {MAX_FILE_BYTES} byte limit for one file; split it into smaller files.",
        )
    old_size = walk.size_of(path)
    if walk.truncated and old_size is None:
        raise ToolFailure(
            ErrorCode.PERMISSION_DENIED,
            f"the workspace has more than {MAX_WALK_ENTRIES} entries; overwrite an existing file instead.",
        )
    if old_size is None and len(walk.files) >= max_files:
        raise ToolFailure(
            ErrorCode.PERMISSION_DENIED,
            f"the workspace already holds {len(walk.files)} files (limit {max_files}); overwrite an existing file instead.",
        )
    total = walk.total_bytes - (old_size or 0) + new_size
    if total > max_bytes:
        raise ToolFailure(
            ErrorCode.PERMISSION_DENIED,
            f"this write would bring the workspace to {total} bytes (limit {max_bytes}); write less or overwrite a large file.",
        )
