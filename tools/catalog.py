"""The one place where tools are registered. Order here is the order in the system prompt (tools
whose needs change from turn to turn go last, `pipeline/catalog.py`) and in its demonstrations
(the first three kinds of tool: the plainest requests first, `pipeline/demos.py`)."""

from __future__ import annotations

from storage.connection import Dialect
from tools.image_analyze import IMAGE_ANALYZE_TOOL
from tools.imagine import IMAGINE_TOOL
from tools.interactive import INTERACTIVE_TOOLS
from tools.learner import TASK_TOOLS
from tools.memory import MEMORY_SEARCH_TOOL, REMEMBER_TOOL
from tools.memory_sql import memory_sql_tool
from tools.open_url import OPEN_URL_TOOL
from tools.registry import ToolRegistry
from tools.run_code import RUN_CODE_TOOL
from tools.weather import WEATHER_TOOL
from tools.web_search import WEB_SEARCH_TOOL
from tools.workspace import WORKSPACE_TOOLS


def build_registry(dialect: Dialect = "sqlite") -> ToolRegistry:
    """Every tool; `dialect` is the database's, named in `/memory_sql`'s description."""
    registry = ToolRegistry()
    registry.register(WEATHER_TOOL)
    registry.register(REMEMBER_TOOL)
    registry.register(WEB_SEARCH_TOOL)
    registry.register(MEMORY_SEARCH_TOOL)
    registry.register(OPEN_URL_TOOL)
    registry.register(memory_sql_tool(dialect))
    registry.register(IMAGE_ANALYZE_TOOL)
    registry.register(IMAGINE_TOOL)
    for tool in WORKSPACE_TOOLS:
        registry.register(tool)
    registry.register(RUN_CODE_TOOL)
    for tool in INTERACTIVE_TOOLS:
        registry.register(tool)
    for tool in TASK_TOOLS:
        registry.register(tool)
    return registry
