"""`/mcp`'s prompts: messages a host puts in front of its own model, filled from the user's data.

- `recall(topic)`: the user's memories that match the topic (the full-text search of
  `memory_search`), each embedded as its `orchestrator://memories/<id>` resource, and an
  instruction to use them.
- `review_file(path, focus?)`: one workspace file embedded as its `file:///` resource (the
  caps of `resources/read`), and a request for a code review.

A prompt is a unit, like a tool: its arguments are a pydantic model, from which the listed
`arguments` are derived, and its handler, blocking, scoped to one user by a `ToolContext`.
Bad arguments and unreadable data are `Problem` values, as for resources.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_server.resource_uris import FileRef, file_uri, memory_uri
from mcp_server.resources import Problem, read_file
from storage.memories import search_memories
from tools.base import ErrorCode, ToolContext

RECALLED = 10  # memories one `recall` embeds, best match first


class RecallArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str = Field(min_length=1, max_length=200, description="What to recall, in a few words (e.g. 'tea')")


class ReviewArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(min_length=1, max_length=512, description="A file of your workspace, e.g. src/main.py")
    focus: str | None = Field(default=None, max_length=500, description="What to look at most (optional)")


@dataclass(frozen=True)
class PromptUnit:
    name: str
    title: str
    description: str
    arguments: type[BaseModel]
    render: Callable[[ToolContext, Any], types.GetPromptResult | Problem]

    def listed(self) -> types.Prompt:
        """The prompt as `prompts/list` shows it, its arguments derived from the model."""
        return types.Prompt(
            name=self.name,
            title=self.title,
            description=self.description,
            arguments=[
                types.PromptArgument(name=name, description=info.description, required=info.is_required())
                for name, info in self.arguments.model_fields.items()
            ],
        )


def user_text(text: str) -> types.PromptMessage:
    return types.PromptMessage(role="user", content=types.TextContent(text=text))


def recall(ctx: ToolContext, arguments: RecallArguments) -> types.GetPromptResult | Problem:
    found = search_memories(ctx.database, ctx.conn, ctx.user_id, arguments.topic, RECALLED)
    if not found:
        text = f"I have no stored memories about {arguments.topic!r}. Answer without them, and say so."
        return types.GetPromptResult(description=f"No memories about {arguments.topic!r}", messages=[user_text(text)])
    embedded = [
        types.PromptMessage(
            role="user",
            content=types.EmbeddedResource(
                resource=types.TextResourceContents(
                    uri=memory_uri(memory.id), mime_type="text/plain", text=memory.content
                )
            ),
        )
        for memory in found
    ]
    instruction = (
        f"Above are {len(found)} things I asked you to remember that match {arguments.topic!r}, best match first. "
        "Use them in your answers about it; say when one no longer seems true."
    )
    return types.GetPromptResult(
        description=f"{len(found)} memories about {arguments.topic!r}", messages=[*embedded, user_text(instruction)]
    )


def review_file(ctx: ToolContext, arguments: ReviewArguments) -> types.GetPromptResult | Problem:
    uri = file_uri(arguments.path)
    read = read_file(ctx, uri, FileRef(arguments.path))
    if isinstance(read, Problem):
        return read
    focus = f" Look most at: {arguments.focus}." if arguments.focus else ""
    request = (
        f"Review the file {arguments.path} above: correctness first, then clarity and naming, then tests it lacks. "
        f"Quote the lines you mean and propose the change.{focus}"
    )
    content = types.EmbeddedResource(resource=read.contents[0])
    return types.GetPromptResult(
        description=f"A review of {arguments.path}",
        messages=[types.PromptMessage(role="user", content=content), user_text(request)],
    )


PROMPTS: dict[str, PromptUnit] = {
    unit.name: unit
    for unit in (
        PromptUnit(
            "recall",
            "Recall memories",
            "Your memories about a topic, embedded, with an instruction to use them.",
            RecallArguments,
            recall,
        ),
        PromptUnit(
            "review_file",
            "Review a workspace file",
            "One of your workspace files, embedded, with a request for a code review.",
            ReviewArguments,
            review_file,
        ),
    )
}


def get(ctx: ToolContext, name: str, arguments: dict[str, str] | None) -> types.GetPromptResult | Problem:
    """Prompt `name` filled with `arguments` for the user of `ctx`."""
    unit = PROMPTS.get(name)
    if unit is None:
        return Problem(ErrorCode.NOT_FOUND, f"no prompt {name!r}; prompts/list lists them ({', '.join(PROMPTS)})")
    try:
        parsed = unit.arguments.model_validate(arguments or {})
    except ValidationError as invalid:
        fields = [{"field": ".".join(map(str, error["loc"])), "problem": error["msg"]} for error in invalid.errors()]
        shown = "; ".join(f"{item['field']}: {item['problem']}" for item in fields)
        return Problem(ErrorCode.VALIDATION_FAILED, f"invalid arguments for {name}: {shown}", {"fields": fields})
    return unit.render(ctx, parsed)
