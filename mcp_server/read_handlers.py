"""The SDK's handlers for `/mcp`'s resources, prompts and completions (SPEC 14, issue 34 part 7).

Each takes the user the endpoint put in the request's scope (from the bearer token), runs its
blocking work on the endpoint's `FairThreads` (the same threads and per-user shares as tool
calls) through `reads.serve` (the app's context and the `tools` budget), and answers the
result or raises the JSON-RPC error of its `Problem`. The lists that hold no user data (the
templates, the prompts) are answered at once, at no cost.

No subscriptions: `/mcp` is stateless (any process answers any request, none keeps a stream),
so there is nowhere to send `notifications/resources/updated` from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import mcp_types as types
from flask import Flask

from api.auth import USER_KEY
from foundation.fair_share import Busy
from mcp_server import completion, prompts, resources
from mcp_server.calls import FairThreads
from mcp_server.reads import answered, serve
from mcp_server.resources import Problem
from storage.users import User
from tools.base import ErrorCode, ToolContext

T = TypeVar("T")


class ReadHandlers:
    """`on_list_resources`, `on_read_resource`, … of the SDK's `Server`, for one Flask app."""

    def __init__(self, flask_app: Flask, pool: Callable[[], FairThreads | None]) -> None:
        self.flask_app = flask_app
        self.pool = pool  # the endpoint's, which exists only while it runs

    async def blocking(self, ctx: Any, work: Callable[[ToolContext], T | Problem]) -> T:
        user: User = ctx.request.scope[USER_KEY]
        pool = self.pool()
        assert pool is not None, "requests arrive only while the endpoint runs"
        try:
            outcome = await pool.run(user.id, lambda: serve(self.flask_app, user.id, work))
        except Busy as busy:
            outcome = Problem(ErrorCode.BUSY, busy.message)
        return answered(outcome)

    async def list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        cursor = None if params is None else params.cursor
        return await self.blocking(ctx, lambda scope: resources.list_page(scope, cursor))

    async def list_resource_templates(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=resources.templates())

    async def read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return await self.blocking(ctx, lambda scope: resources.read(scope, params.uri))

    async def list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[unit.listed() for unit in prompts.PROMPTS.values()])

    async def get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        return await self.blocking(ctx, lambda scope: prompts.get(scope, params.name, params.arguments))

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        return await self.blocking(ctx, lambda scope: completion.complete(scope, params))
