"""`/memory_search` and `/remember`: the user's own history and saved facts."""

from __future__ import annotations

from pydantic import Field

from storage.memories import add_memory, find_memory
from storage.search import SearchHit, search_user_history
from tools.base import (
    READ_ONLY_LOCAL,
    CommandBinding,
    ErrorCode,
    Tool,
    ToolContext,
    ToolFailure,
    ToolHints,
    ToolInput,
    ToolOutput,
)

MAX_HITS = 8


class MemorySearchInput(ToolInput):
    query: str = Field(min_length=1, max_length=500, description="Words to look for in past messages and memories.")


class MemorySearchOutput(ToolOutput):
    query: str
    hits: list[SearchHit]

    def render(self) -> str:
        if not self.hits:
            return f"No past messages or memories match “{self.query}”."
        lines = [f"{len(self.hits)} matches for “{self.query}” (best first):"]
        for number, hit in enumerate(self.hits, start=1):
            where = "memory" if hit.source == "memory" else f"{hit.role} message"
            snippet = " ".join(hit.snippet.split())
            lines.append(f"{number}. [{where} #{hit.id}, {hit.created_at}] {snippet}")
        return "\n".join(lines)


def memory_search(data: MemorySearchInput, ctx: ToolContext) -> MemorySearchOutput:
    """Search the user's own messages and memories; the current turn's message is left out."""
    excluded = [ctx.turn_message_id] if ctx.turn_message_id is not None else []
    with ctx.storage_span("search"):
        hits = search_user_history(
            ctx.database, ctx.conn, ctx.user_id, data.query, limit=MAX_HITS, exclude_message_ids=excluded
        )
    return MemorySearchOutput(query=data.query, hits=hits)


class RememberInput(ToolInput):
    fact: str = Field(min_length=1, max_length=2000, description="The fact to keep, in one sentence.")
    importance: int = Field(default=1, ge=1, le=10, description="1 (trivia) to 10 (essential).")


class RememberOutput(ToolOutput):
    id: int
    content: str
    already_known: bool

    def render(self) -> str:
        if self.already_known:
            return f"Already remembered as memory #{self.id}: {self.content}"
        return f"Remembered as memory #{self.id}: {self.content}"


def remember(data: RememberInput, ctx: ToolContext) -> RememberOutput:
    existing = find_memory(ctx.conn, ctx.user_id, data.fact)
    if existing is not None:
        return RememberOutput(id=existing.id, content=existing.content, already_known=True)
    memory = add_memory(ctx.conn, ctx.user_id, data.fact, data.importance)
    if memory.id <= 0:
        raise ToolFailure(ErrorCode.INTERNAL_ERROR, "the memory could not be stored; try again.")
    return RememberOutput(id=memory.id, content=memory.content, already_known=False)


MEMORY_SEARCH_TOOL = Tool(
    name="memory_search",
    annotations=READ_ONLY_LOCAL,  # served over /mcp
    description="Search this user's past messages and saved memories (full-text, best matches first).",
    input_model=MemorySearchInput,
    output_model=MemorySearchOutput,
    handler=memory_search,
    result_role="memory_search_tools",
    command=CommandBinding(
        name="memory_search",
        usage="/memory_search <words to look for>",
        example="/memory_search favourite programming language",
        request="Which programming language did I say I like best?",
        args_field="query",
    ),
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)

REMEMBER_TOOL = Tool(
    name="remember",
    annotations=ToolHints(destructive=False, idempotent=False, open_world=False),  # served over /mcp: adds a memory
    description="Store a fact about the user for later conversations.",
    input_model=RememberInput,
    output_model=RememberOutput,
    handler=remember,
    result_role="memory_tools",
    command=CommandBinding(
        name="remember",
        usage="/remember <fact>",
        example="/remember The user prefers metric units",
        args_field="fact",
        request="Please remember that I prefer metric units.",
        demonstrates=False,  # any sentence fits its argument: shown, it swallows every message
    ),
    budget="tools",  # a direct POST /tools/<name> spends the `tools` budget (SPEC 12)
)
