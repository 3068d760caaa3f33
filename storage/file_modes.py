"""The server's files are readable by the server's user only (SPEC 12): the database, the
uploads, the generated images, the workspaces, the keys and tokens.

From start-up on, `OWNER_ONLY_UMASK` makes every new file 0600 and every new directory 0700
(SQLite gives its -wal and -shm files the database's own mode). Files made by an earlier
version, or copied in by hand, are corrected once at start: `restrict` walks DATA_DIR (never
following a symbolic link) and the database and token files, and takes every group and
other permission away. It only ever removes permissions, so running it again does nothing.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

OWNER_ONLY_UMASK = 0o077
DATABASE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def owner_only_from_now() -> None:
    """Every file and directory this process creates from now on is its user's alone."""
    os.umask(OWNER_ONLY_UMASK)


def server_paths(data_dir: str, database_path: str | None, token_file: str) -> list[Path]:
    """DATA_DIR (a tree) and the files that may live outside it (`database_path` None: the
    database is a server's, no local file)."""
    local = database_path is not None and database_path != ":memory:"
    database = [Path(database_path + suffix) for suffix in DATABASE_SIDE_FILES] if local and database_path else []
    return [Path(data_dir), *database, Path(token_file)]


def restrict(paths: Iterable[Path]) -> int:
    """Take group and other permissions away from each path and, for a directory, from
    everything below it; returns how many entries changed. Missing paths are skipped."""
    changed = 0
    for path in paths:
        path = path.resolve()  # the operator's own link (DATA_DIR -> /srv/data) is followed; none below it
        try:
            info = path.lstat()
        except FileNotFoundError:
            continue
        changed += _restrict_one(str(path), info)
        if stat.S_ISDIR(info.st_mode):
            changed += _restrict_tree(str(path))
    return changed


def _restrict_tree(top: str) -> int:
    changed = 0
    pending = [top]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    continue
                changed += _restrict_one(entry.path, entry.stat(follow_symlinks=False))
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
    return changed


def _restrict_one(path: str, info: os.stat_result) -> int:
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode) or not mode & 0o077:
        return 0
    os.chmod(path, mode & 0o700)  # symbolic links were skipped above: this never follows one
    return 1
