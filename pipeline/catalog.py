"""Which commands a turn offers: those that can succeed in this deployment and session (SPEC 6.2).

A tool declares what it needs (`Tool.needs`: a judge, an image provider, an image in the
context, a course); a turn knows what it has (`Reach`). Offering only what can work keeps a
small model from reaching for `/run_code` with no judge or `/image_analyze` with no image,
the commands that distracted it most.

Order matters to a model server's prompt cache (llama.cpp, vLLM and Ollama reuse an unchanged
prefix): tools whose needs change from turn to turn (`SESSION_NEEDS`) come last, so a turn that
gains or loses an image changes only the end of the command list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tools.base import SESSION_NEEDS, Need, Tool
from tools.registry import ToolRegistry


@dataclass(frozen=True)
class Reach:
    """What this turn has: the needs that are met."""

    met: frozenset[Need]

    @classmethod
    def of(cls, *, judge: bool, image_provider: bool, image: bool, course: bool) -> Reach:
        flags = {Need.JUDGE: judge, Need.IMAGE_PROVIDER: image_provider, Need.IMAGE: image, Need.COURSE: course}
        return cls(frozenset(need for need, present in flags.items() if present))


EVERYTHING = Reach(frozenset(Need))


def offered(registry: ToolRegistry, reach: Reach) -> list[Tool[Any, Any]]:
    """The commands of one turn, stable ones first (registration order within each group)."""
    usable = [tool for tool in registry.commands() if tool.needs <= reach.met]
    return sorted(usable, key=lambda tool: bool(tool.needs & SESSION_NEEDS))
