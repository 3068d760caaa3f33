"""The one place where tools are registered. Order here is the order in the system prompt."""

from __future__ import annotations

from tools.imagine import IMAGINE_TOOL
from tools.memory import MEMORY_SEARCH_TOOL, REMEMBER_TOOL
from tools.memory_sql import MEMORY_SQL_TOOL
from tools.registry import ToolRegistry


def build_registry() -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(MEMORY_SEARCH_TOOL)
    registry.register(MEMORY_SQL_TOOL)
    registry.register(REMEMBER_TOOL)
    registry.register(IMAGINE_TOOL)
    return registry
