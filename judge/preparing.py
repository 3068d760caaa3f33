"""Is the judge being prepared? `scripts/judge_images.sh` says so with a marker file.

`make run` starts the chat at once and builds the judge's images in the background (the first
build takes minutes). While that build runs, the script keeps its process id in
`DATA_DIR/judge-images/building` and removes the file when it ends, however it ends. A judge
that is not available while that process lives is "preparing", not broken: `/health` says so,
`/run` and `/submit` answer 503 `judge_preparing`, and the web UI's Code and Problems panels
say the code runner is being prepared.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

JudgeStateName = Literal["ready", "preparing", "unavailable", "off"]

MARKER = Path("judge-images") / "building"  # under DATA_DIR; scripts/judge_images.sh writes it


def marker_path(data_dir: str | Path) -> Path:
    return Path(data_dir) / MARKER


def build_running(data_dir: str | Path) -> bool:
    """True while the process named in the marker lives (a marker left by a killed build, or
    one holding no process id, counts as no build)."""
    try:
        pid = int(marker_path(data_dir).read_text(encoding="utf-8").split()[0])
    except (OSError, ValueError, IndexError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, owned by another user (a build run as root)
    return True


def judge_state(available: bool, reason: str | None, preparing: bool) -> JudgeStateName:
    """One word for the judge: `ready`, `preparing` (a build runs), `off` (JUDGE_ENABLED=0) or
    `unavailable` (anything else: no engine, images missing and no build running)."""
    if available:
        return "ready"
    if preparing:
        return "preparing"
    if reason and "JUDGE_ENABLED" in reason:
        return "off"
    return "unavailable"
