"""`GET /openapi.json` (OpenAPI 3.1) and `GET /docs` (a browsable reference of it).

The document is built from the app itself: its paths from `app.url_map`, each operation
from what its view declares (`@operation(...)` and `@budget(...)`, `api/declare.py`, read
through `app.view_functions`), every schema from the pydantic models the handlers validate
bodies with and build answers through (`models_json_schema`; OpenAPI 3.1's schemas are
JSON Schema 2020-12, which pydantic writes). `POST /tools/<name>` is one operation per
registered tool, with the tool's input and output models and its `Tool.budget`. The builder
adds the answers that follow from the app's rules (401, 400/413 for a body, 403 for a change
made with the login cookie, 429 where a budget is spent or a stream answers), so they are
declared wherever they can happen.

Built once per app, on first request, and kept in `app.extensions` (the app's routes and
tools do not change after start-up).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flask import Blueprint, Flask, Response, current_app, jsonify, send_from_directory
from flask.typing import ResponseReturnValue
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from werkzeug.routing import Rule

from api.declare import (
    HEADERS,
    HTML,
    JSON,
    SSE,
    UNDOCUMENTED,
    OneOperationPerTool,
    Operation,
    Reply,
    budget_of,
    operation,
    operation_of,
)
from api.openapi.models import ErrorBody, TaskErrorBody
from api.services import services_of
from api.ui import PAGE_HEADERS
from tools.base import Tool

bp = Blueprint("openapi", __name__)

REF_TEMPLATE = "#/components/schemas/{model}"
EXTENSION_KEY = "openapi_document"
# path items served beside Flask's routes, outside its url_map, registered by what serves them
# (`/mcp`: `mcp_server/openapi.py`, when the ASGI app is built); absent from an app served without it
EXTRA_PATHS_KEY = "openapi_extra_paths"
IGNORED_METHODS = frozenset({"HEAD", "OPTIONS"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # changes need `X-Requested-With` with a cookie (`api/auth.py`)
# the order of the groups in the document (and in `/docs`); a tag not listed follows them, as first used
TAG_ORDER = (
    "auth",
    "chat",
    "sessions",
    "judge",
    "files",
    "tools",
    "health",
    "profile",
    "ui",
    "instructor",
    "openai",
    "mcp",
    "reference",
)
CONVERTERS: dict[str, dict[str, Any]] = {
    "default": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
    "string": {"type": "string", "minLength": 1, "pattern": "^[^/]+$"},
    "path": {"type": "string", "minLength": 1},
    "int": {"type": "integer", "minimum": 0},
}
PLACEHOLDER = re.compile(r"<(?:(\w+)(?:\([^)]*\))?:)?(\w+)>")  # Werkzeug's `<converter(args):name>`
TASK_TOOL_ERROR = "a task tool's refusal (SPEC 10: `NOT_FOUND`, `INVALID_STATE`, `BLOCKED`, …)"


class DocumentError(Exception):
    """A route's view declares no `@operation`."""


class SchemaSet:
    """The models the document refers to; resolved to `$ref`s all at once by `models_json_schema`."""

    def __init__(self) -> None:
        self.wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = []

    def ref(self, model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        """A placeholder filled in by `resolve`: `{"$model": (model, mode)}`."""
        if (model, mode) not in self.wanted:
            self.wanted.append((model, mode))
        return {"$model": (model, mode)}

    def resolve(self, document: dict[str, Any]) -> dict[str, Any]:
        refs, defs = models_json_schema(self.wanted, ref_template=REF_TEMPLATE)

        def fill(node: Any) -> Any:
            if isinstance(node, dict):
                if "$model" in node:
                    return refs[node["$model"]]
                return {key: fill(value) for key, value in node.items()}
            if isinstance(node, list):
                return [fill(item) for item in node]
            return node

        document = fill(document)
        document["components"]["schemas"] = dict(sorted(defs.get("$defs", {}).items()))
        return document


def openapi_path(rule: Rule) -> tuple[str, list[dict[str, Any]]]:
    """`/sessions/<session_id>` as `/sessions/{session_id}` and its path parameters."""
    params: list[dict[str, Any]] = []
    for match in PLACEHOLDER.finditer(rule.rule):
        converter, name = match.group(1) or "default", match.group(2)
        schema = dict(CONVERTERS.get(converter, CONVERTERS["default"]))
        bound = getattr(rule._converters.get(name), "max", None)  # `<int(max=…):id>`: Werkzeug keeps no public copy
        if converter == "int" and bound is not None:
            schema["maximum"] = bound
        params.append({"name": name, "in": "path", "required": True, "schema": schema})
    return PLACEHOLDER.sub(r"{\2}", rule.rule), params


def response_object(reply: Reply, schemas: SchemaSet, error_model: type[BaseModel], status: int) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": reply.description}
    model = reply.model or (error_model if status >= 400 else None)
    content: dict[str, Any] = {}
    for media in reply.media:
        if media == "application/json" and model is not None:
            content[media] = {"schema": schemas.ref(model, "serialization")}
        elif media == SSE:
            content[media] = {"schema": sse_event_schema(reply, schemas)}
        elif media == "application/json":
            content[media] = {"schema": {"type": "object"}}
        else:
            content[media] = {
                "schema": {"type": "string"}
                if media.startswith("text/")
                else {"type": "string", "contentMediaType": media}
            }
    if content:
        answer["content"] = content
    if reply.links:
        answer["links"] = {
            target: {"operationId": target, "parameters": parameters} for target, parameters in reply.links.items()
        }
    if reply.headers:
        answer["headers"] = {
            name: {"description": HEADERS[name], "schema": {"type": "string"}} for name in reply.headers
        }
    return answer


def sse_event_schema(reply: Reply, schemas: SchemaSet) -> dict[str, Any]:
    """One server-sent event (`event`, `id`, `data`), the convention of OpenAPI 3.2's `itemSchema`
    that fuzzers validate each event against. SPEC 7 events carry JSON `data`; a `done` event
    carries the turn's answer (`reply.model`) where the stream is a turn's. `/v1`'s chunk stream
    ends with `data: [DONE]`, which is not JSON, so there (`event_data="text"`) `data` is a
    plain string."""
    json_data = reply.event_data == "json"
    data: dict[str, Any] = {"type": "string"}
    if json_data:
        data = {"type": "string", "contentMediaType": "application/json", "contentSchema": {"type": "object"}}
    event: dict[str, Any] = {
        "type": "object",
        "properties": {
            "event": {"type": "string", "description": "`turn.started`, `answer.delta`, `done`, `error`, … (SPEC 7)"},
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "retry": {"type": "integer"},
            "data": data,
        },
    }
    if json_data and reply.model is not None:
        event["if"] = {"required": ["event"], "properties": {"event": {"const": "done"}}}
        event["then"] = {"properties": {"data": {**data, "contentSchema": schemas.ref(reply.model, "serialization")}}}
    return event


def implied_replies(operation: Operation, method: str, limited: bool) -> dict[int, Reply]:
    """Answers that follow from the app's rules rather than from the view."""
    implied: dict[int, Reply] = {}
    if operation.body is not None:
        implied[400] = Reply(
            "the body is not a JSON object or fails validation (`invalid_json`, `invalid_request`; "
            "field errors in `details`)"
        )
        implied[413] = Reply("the body is larger than this endpoint takes (`payload_too_large`)")
    if operation.auth:
        implied[401] = Reply("no valid bearer token or session cookie (`unauthorized`)")
        if method not in SAFE_METHODS:
            implied[403] = Reply("a cookie-authenticated change without `X-Requested-With` (`csrf_header_missing`)")
    if limited:
        implied[429] = Reply(
            "a per-user limit is spent (`rate_limited`); `Retry-After` says when to retry", headers=("Retry-After",)
        )
    return implied


def is_limited(operation: Operation, view: Callable[..., Any]) -> bool:
    """Whether a request may be refused by a per-user limit: a budget the view declares (spent
    before it runs or by itself), or a seat of `MAX_STREAMS_PER_USER` for an event stream."""
    declared = budget_of(view)
    spends = declared is not None and (declared.charged is not None or bool(declared.by_view))
    return spends or any(SSE in reply.media for reply in operation.replies.values())


def operation_object(
    endpoint: str,
    method: str,
    operation: Operation,
    limited: bool,
    schemas: SchemaSet,
    path_params: list[dict[str, Any]],
) -> dict[str, Any]:
    replies = {**implied_replies(operation, method, limited), **operation.replies}
    answer: dict[str, Any] = {
        "operationId": endpoint,
        "summary": operation.summary,
        "tags": [operation.tag or endpoint.split(".")[0]],
    }
    if operation.description:
        answer["description"] = operation.description
    params = path_params + [
        {
            "name": p.name,
            "in": p.where,
            "required": False,
            "schema": p.schema,
            **({"description": p.description} if p.description else {}),
        }
        for p in operation.params
    ]
    if params:
        answer["parameters"] = params
    if operation.body is not None:
        content = {"application/json": {"schema": schemas.ref(operation.body, "validation")}}
        if operation.multipart:
            content["multipart/form-data"] = {"schema": multipart_schema()}
        answer["requestBody"] = {"required": not operation.body_optional, "content": content}
    answer["responses"] = {
        str(status): response_object(reply, schemas, operation.error_model, status)
        for status, reply in sorted(replies.items())
    }
    answer["security"] = [{"bearerAuth": []}, {"cookieAuth": []}] if operation.auth else []
    return answer


def multipart_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["message"],
        "properties": {
            "message": {"type": "string", "maxLength": 32000},
            "session_id": {"type": "string", "maxLength": 64},
            "retry_of": {"type": "integer", "minimum": 1},
            "images[]": {"type": "array", "maxItems": 4, "items": {"type": "string", "contentMediaType": "image/*"}},
        },
    }


def tool_operation(tool: Tool[Any, Any]) -> Operation:
    """`POST /tools/<tool.name>`: the tool's input as the body, its output as the 200 answer."""
    task = tool.error_style == "task"
    failure = TASK_TOOL_ERROR if task else "the tool's error code (`VALIDATION_FAILED`, `NOT_FOUND`, …)"
    replies = {200: Reply("the tool's output", tool.output_model)}
    for status in (400, 403, 404, 409, 500, 502, 503, 504):
        replies[status] = Reply(failure)
    return Operation(
        summary=tool.description.split("\n")[0][:200],
        body=tool.input_model,
        description=tool.description,
        replies=replies,
        tag="tools",
    )


def tool_paths(app: Flask, schemas: SchemaSet) -> dict[str, dict[str, Any]]:
    registry = services_of(app).turns.registry
    paths: dict[str, dict[str, Any]] = {}
    for tool in registry:
        endpoint = f"tools.call.{tool.name}"
        item = operation_object(endpoint, "POST", tool_operation(tool), False, schemas, [])
        if tool.error_style == "task":  # 400 from the body reader is ours; the tool's own refusals are SPEC 10's
            for status, response in item["responses"].items():
                if status[0] in "45" and status not in ("401", "413", "429"):
                    response["content"] = {
                        "application/json": {
                            "schema": {
                                "anyOf": [
                                    schemas.ref(TaskErrorBody, "serialization"),
                                    schemas.ref(ErrorBody, "serialization"),
                                ]
                            }
                        }
                    }
        if tool.budget is not None:
            item["responses"]["429"] = response_object(
                Reply("a per-user limit is spent (`rate_limited`)", headers=("Retry-After",)), schemas, ErrorBody, 429
            )
        paths[f"/tools/{tool.name}"] = {"post": item}
    return paths


def build_document(app: Flask) -> dict[str, Any]:
    """The OpenAPI 3.1 document of `app`; raises `DocumentError` for a view without `@operation`."""
    schemas = SchemaSet()
    paths: dict[str, dict[str, Any]] = {}
    missing = []
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint in UNDOCUMENTED:
            continue
        view = app.view_functions[rule.endpoint]
        declared = operation_of(view)
        if isinstance(declared, OneOperationPerTool):
            paths.update(tool_paths(app, schemas))
            continue
        if declared is None:
            missing.append(f"{rule.rule} ({rule.endpoint})")
            continue
        path, params = openapi_path(rule)
        limited = is_limited(declared, view)
        for method in sorted((rule.methods or set()) - IGNORED_METHODS):
            paths.setdefault(path, {})[method.lower()] = operation_object(
                rule.endpoint, method, declared, limited, schemas, params
            )
    paths.update(app.extensions.get(EXTRA_PATHS_KEY, {}))
    if missing:
        raise DocumentError("routes whose view declares no @operation (api/declare.py): " + ", ".join(missing))
    used = [tag for item in paths.values() for op in item.values() for tag in op["tags"]]
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "Chat orchestrator API",
            "version": "1",
            "description": "Every endpoint of the orchestrator (SPEC section 4). Errors are "
            '`{"error": {"code", "message", "details"?}}`, except `/v1/*` (OpenAI\'s '
            'shape) and the learner-task tools (`{"success": false, "error_code", '
            '"message"}`).',
        },
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "tags": [{"name": name} for name in dict.fromkeys([*TAG_ORDER, *used])],
        "paths": paths,
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "an API token (`python app.py create-user`)",
                },
                "cookieAuth": {
                    "type": "apiKey",
                    "in": "cookie",
                    "name": "session",
                    "description": "the web UI's cookie from `POST /api/login`; changes also need `X-Requested-With`",
                },
            }
        },
    }
    return schemas.resolve(document)


def document_of(app: Flask) -> dict[str, Any]:
    """The document, built once per version of the tool registry (MCP tools join and leave at
    run time, `tools/registry.py`)."""
    version = services_of(app).turns.registry.version
    cached = app.extensions.get(EXTENSION_KEY)
    if not (isinstance(cached, tuple) and cached[0] == version):
        cached = (version, build_document(app))
        app.extensions[EXTENSION_KEY] = cached
    document: dict[str, Any] = cached[1]
    return document


@bp.get("/openapi.json")
@operation(
    "This document (OpenAPI 3.1)", tag="reference", auth=False, replies={200: Reply("the document", media=(JSON,))}
)
def document() -> ResponseReturnValue:
    return jsonify(document_of(current_app._get_current_object()))  # type: ignore[attr-defined]  # a proxy: the cache lives on the real app


@bp.get("/docs")
@operation(
    "A browsable reference of this document",
    tag="reference",
    auth=False,
    replies={200: Reply("the page", media=(HTML,))},
)
def docs() -> Response:
    response = send_from_directory(current_app.static_folder or "static", "docs.html", max_age=0)
    response.headers.update(PAGE_HEADERS)
    return response
