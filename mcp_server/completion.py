"""`completion/complete` for the arguments a host may not know by heart: the workspace paths
of `review_file` and of the `file:///{+path}` template, the memory ids of the memory template.

Values are the user's own (the same `ToolContext` scope as a read), those that start with what
was typed, at most `MAX_VALUES` (the spec's cap), `hasMore` when there were more. Anything else
(another prompt's argument, an unknown reference) completes to nothing, which the spec allows.
"""

from __future__ import annotations

import mcp_types as types

from mcp_server.resource_uris import FILE_TEMPLATE, MEMORY_TEMPLATE
from storage.memories import list_memories
from tools.base import ToolContext
from tools.workspace.fs import walk_workspace
from tools.workspace.paths import workspace_root

MAX_VALUES = 100
MEMORY_IDS_LOOKED_AT = 1000  # newest first: completion is for the ones a person recently stored


def complete(ctx: ToolContext, params: types.CompleteRequestParams) -> types.CompleteResult:
    typed = params.argument.value
    ref = params.ref
    if is_path(ref, params.argument.name):
        candidates = [entry.path for entry in walk_workspace(workspace_root(ctx.settings, ctx.user_id)).files]
    elif (
        isinstance(ref, types.ResourceTemplateReference) and ref.uri == MEMORY_TEMPLATE and params.argument.name == "id"
    ):
        candidates = [str(memory.id) for memory in list_memories(ctx.conn, ctx.user_id, MEMORY_IDS_LOOKED_AT)]
    else:
        candidates = []
    matching = [value for value in candidates if value.startswith(typed)]
    shown = matching[:MAX_VALUES]
    return types.CompleteResult(
        completion=types.Completion(values=shown, total=len(matching), has_more=len(matching) > len(shown))
    )


def is_path(ref: types.PromptReference | types.ResourceTemplateReference, argument: str) -> bool:
    if isinstance(ref, types.PromptReference):
        return ref.name == "review_file" and argument == "path"
    return ref.uri == FILE_TEMPLATE and argument == "path"
