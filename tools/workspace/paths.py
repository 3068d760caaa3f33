"""The one place where a model-supplied path becomes a path on disk.

Every workspace tool calls `resolve_path(root, raw)` and nothing else turns text into a
filesystem location. The rules, in order (each refusal says how to fix the call):

* empty (or only `.` / `/` separators), NUL or other control characters: VALIDATION_FAILED.
  Control characters are never needed in a file name and would corrupt the `file:line`
  output of `/search_files`.
* backslashes: VALIDATION_FAILED. On POSIX `\\` is an ordinary name character, so `..\\x`
  would not escape anything; but a model writing one means a Windows separator, and taking
  it literally would create a file called `a\\b.txt` that the model later looks for as a
  directory. Refusing with "use forward slashes" is clearer than silently surprising it.
* absolute paths (`/etc/passwd`) and drive letters (`C:/x`): PERMISSION_DENIED.
* a component starting with `~`: VALIDATION_FAILED (no home expansion happens here, and a
  literal `~` directory would only confuse the model).
* `..` components: PERMISSION_DENIED (`.` components and repeated slashes are dropped).
* more than MAX_PATH_CHARS characters, MAX_COMPONENT_BYTES bytes in one component, or
  MAX_DEPTH components: VALIDATION_FAILED.
* an existing component that is a symlink (inside or outside the workspace, to a file or a
  directory): PERMISSION_DENIED; symlinks are never followed. Each component is checked
  with `os.lstat`, and the I/O in `fs.py` reopens every component with `O_NOFOLLOW`
  relative to its parent's descriptor, so a component swapped for a symlink after this
  check still cannot redirect a read or a write.
* an existing component that is a FIFO, socket or device: PERMISSION_DENIED; only regular
  files and directories are handled. A file used as a directory: VALIDATION_FAILED.

The workspace of a user is `<DATA_DIR>/workspaces/<user_id>/`, created on first use.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from config.settings import Settings
from tools.base import ErrorCode, ToolFailure

MAX_PATH_CHARS = 512
MAX_COMPONENT_BYTES = 255  # NAME_MAX on common filesystems
MAX_DEPTH = 16
WORKSPACES_DIRNAME = "workspaces"

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass(frozen=True)
class SafePath:
    """A validated location inside one workspace: its root and its relative components."""

    root: Path
    parts: tuple[str, ...]

    @property
    def absolute(self) -> Path:
        return self.root.joinpath(*self.parts)

    @property
    def relative(self) -> str:
        return "/".join(self.parts)


def workspace_root(settings: Settings, user_id: int) -> Path:
    """This user's workspace directory, created (mode 0700) on first use.

    `user_id` is an int from the authenticated context, never model text, so users can
    only ever reach their own directory. The data directory is resolved once with
    `realpath` (an operator may legitimately symlink it); the two levels we create must be
    real directories.
    """
    data_dir = Path(os.path.realpath(settings.data_dir))
    data_dir.mkdir(parents=True, exist_ok=True)
    base = data_dir / WORKSPACES_DIRNAME
    root = base / str(int(user_id))
    for directory in (base, root):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            raise ToolFailure(ErrorCode.INTERNAL_ERROR, "the workspace directory is not usable; contact the operator.")
    return root


def _denied(message: str) -> ToolFailure:
    return ToolFailure(ErrorCode.PERMISSION_DENIED, message)


def _invalid(message: str) -> ToolFailure:
    return ToolFailure(ErrorCode.VALIDATION_FAILED, message)


def split_path(raw: str) -> tuple[str, ...]:
    """Validate the text of a path and return its components (no filesystem access)."""
    if not isinstance(raw, str) or not raw.strip():
        raise _invalid("the path is empty; give a path relative to your workspace, e.g. notes/todo.txt.")
    if "\x00" in raw or _CONTROL.search(raw):
        raise _invalid("the path contains a NUL or control character; use plain printable characters.")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise _invalid("the path is not valid Unicode text; use plain printable characters.") from None
    if "\\" in raw:
        raise _invalid("the path contains a backslash; use forward slashes, e.g. src/main.py.")
    if len(raw) > MAX_PATH_CHARS:
        raise _invalid(f"the path is {len(raw)} characters long; use at most {MAX_PATH_CHARS}.")
    if raw.startswith("/") or _DRIVE.match(raw):
        raise _denied("absolute paths are not allowed; give a path relative to your workspace, e.g. notes/todo.txt.")
    parts = tuple(part for part in raw.split("/") if part not in ("", "."))
    if not parts:
        raise _invalid("the path names the workspace itself; name a file inside it, e.g. notes/todo.txt.")
    for part in parts:
        if part == "..":
            raise _denied("'..' is not allowed in paths; give a path inside your workspace, without '..'.")
        if part.startswith("~"):
            raise _invalid(
                f"path component {part!r} starts with '~'; there is no home directory here, use a relative path."
            )
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise _invalid(f"a path component is longer than {MAX_COMPONENT_BYTES} bytes; use a shorter name.")
    if len(parts) > MAX_DEPTH:
        raise _invalid(f"the path is {len(parts)} directories deep; use at most {MAX_DEPTH} levels.")
    return parts


def describe_mode(mode: int) -> str | None:
    """Why a file type is refused, or None for a regular file or directory."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link (links are never followed)"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def resolve_path(root: Path, raw: str) -> SafePath:
    """Turn a model-supplied relative path into a `SafePath` strictly inside `root`.

    Components that exist are checked with `os.lstat` (never following a link); the first
    missing component ends the check, since nothing below it can exist. Missing files are
    fine here: the caller decides whether it needs the file to exist.
    """
    parts = split_path(raw)
    current = root
    for index, part in enumerate(parts):
        current = current / part
        shown = "/".join(parts[: index + 1])
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            break
        except NotADirectoryError:
            raise _invalid(f"{'/'.join(parts[:index])} is a file, not a directory; fix the path.") from None
        except OSError as error:
            raise _invalid(f"{shown} cannot be examined ({error.strerror}); use another path.") from None
        problem = describe_mode(mode)
        if problem is not None:
            raise _denied(f"{shown} is {problem}; only regular files and directories can be used.")
        if index < len(parts) - 1 and not stat.S_ISDIR(mode):
            raise _invalid(f"{shown} is a file, not a directory; fix the path.")
    return SafePath(root=root, parts=parts)
