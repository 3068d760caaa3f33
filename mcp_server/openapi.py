"""`/mcp` in `GET /openapi.json`: one `post` operation, declared here beside the endpoint.

`/mcp` is served outside Flask's routes (`serving/asgi.py` hands it to `McpEndpoint`), so its
operation is not read from a view: the endpoint registers this path item on the Flask app
(`api.openapi.document.EXTRA_PATHS_KEY`) when it is built, and the document lists it beside
the routes. The bodies are JSON-RPC 2.0 messages; their schemas come from the models below.
What an MCP host needs beyond them (the methods, the tools) is MCP's own `tools/list`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

ERROR_BODY = {"$ref": "#/components/schemas/ErrorBody"}


class JsonRpcMessage(BaseModel):
    """A JSON-RPC 2.0 request (with an `id`) or notification (without) of MCP."""

    jsonrpc: Literal["2.0"]
    method: str = Field(
        description="`initialize`, `tools/list`, `tools/call`, `resources/list`, `resources/read`, `prompts/get`, "
        "`ping`, a notification…"
    )
    id: Any = Field(default=None, description="a string or an integer; absent in a notification")
    params: dict[str, Any] | None = None


class JsonRpcAnswer(BaseModel):
    """A JSON-RPC 2.0 answer: `result`, or `error` (`{"code": int, "message": str, "data"?}`).
    A tool that fails answers a `result` with `isError: true`, no `structuredContent`, and two
    text blocks: `Error: <code>: <message>` and the JSON error body `{"error": {...}}`."""

    jsonrpc: Literal["2.0"]
    id: Any = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def path_item() -> dict[str, Any]:
    answer = JsonRpcAnswer.model_json_schema()

    def error(description: str) -> dict[str, Any]:
        return {"description": description, "content": json_content(ERROR_BODY)}

    return {
        "post": {
            "operationId": "mcp",
            "tags": ["mcp"],
            "summary": "MCP (streamable HTTP, stateless): list and call the tools of POST /tools/<name>",
            "description": "A JSON-RPC 2.0 message of the Model Context Protocol; the answer is JSON "
            "(no event stream). Each call spends the tool's budget, as over HTTP; over budget is a "
            "result with `isError` and the code `rate_limited` in its text. "
            "`GET /mcp` answers 405: the server sends no messages of its own. A `Host` the server does "
            "not serve, or an `Origin` not in `MCP_ALLOWED_ORIGINS`, answers 403 (DNS-rebinding protection).",
            "security": [{"bearerAuth": []}],
            "requestBody": {"required": True, "content": json_content(JsonRpcMessage.model_json_schema())},
            "responses": {
                "200": {"description": "the JSON-RPC answer", "content": json_content(answer)},
                "202": {"description": "a notification or an answer, accepted (no body)"},
                "400": {
                    "description": "not a JSON-RPC message of MCP, or JSON over the limits of the API "
                    "(a JSON-RPC error, `-32700` parse error or `-32602` invalid)",
                    "content": json_content(answer),
                },
                "401": {
                    **error("missing or invalid bearer token (`unauthorized`)"),
                    "headers": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "`Bearer`"}},
                },
                "403": error(
                    "DNS-rebinding protection: a `Host` the server does not serve (`host_not_allowed`) "
                    "or an `Origin` not in `MCP_ALLOWED_ORIGINS` (`origin_not_allowed`)"
                ),
                "405": {
                    "description": "a method MCP's stateless transport does not take",
                    "content": json_content(answer),
                },
                "413": error("the body is over 8 MiB (`payload_too_large`)"),
                "415": error("the body is not `application/json` (`unsupported_media_type`)"),
                "503": error("the endpoint is not running (`mcp_unavailable`)"),
            },
        }
    }
