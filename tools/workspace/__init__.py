"""Sandboxed per-user workspace file tools (`file_tools` role).

Layout: `paths.py` turns model text into a safe location (the one resolver), `fs.py` does
descriptor-relative I/O and holds the caps, `globs.py` matches file globs,
`edit_blocks.py` parses and applies SEARCH/REPLACE blocks, and `file_tools.py` /
`find_tools.py` define the five tool units registered in `tools/catalog.py`.
"""

from __future__ import annotations

from typing import Any

from tools.base import Tool
from tools.workspace.file_tools import EDIT_FILE_TOOL, READ_FILE_TOOL, WRITE_FILE_TOOL
from tools.workspace.find_tools import LIST_FILES_TOOL, SEARCH_FILES_TOOL

WORKSPACE_TOOLS: tuple[Tool[Any, Any], ...] = (
    READ_FILE_TOOL,
    WRITE_FILE_TOOL,
    EDIT_FILE_TOOL,
    LIST_FILES_TOOL,
    SEARCH_FILES_TOOL,
)

__all__ = ["WORKSPACE_TOOLS"]
