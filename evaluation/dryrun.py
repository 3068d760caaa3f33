"""Tools in dry-run: the real binding, input model and role, a handler that runs nothing.

A case's command is read and validated exactly as in production (`commands.router.route`:
the binding maps the line onto the input, the input model or the JSON schema checks it, a
wrong call is the same VALIDATION_FAILED result with the usage), but the handler only returns
the case's canned result. BFCL functions become tools through the generic binding
(`tools.generic.schema_tool`), once their schema is made JSON Schema (`json_schema`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from config.settings import Settings
from storage.db import Database
from tools.base import ToolContext
from tools.generic import TextOutput, schema_tool
from tools.registry import ToolRegistry

DRY_RUN_ROLE = "eval_tools"  # the result role of a BFCL function
NO_RESULT = "(dry run: the case gives no result)"
# BFCL's parameter types that JSON Schema spells otherwise ("any": no type at all)
BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array"}
NOT_JSON_SCHEMA = frozenset({"optional"})  # BFCL's own keys, which a validator would not read


def canned(result: str | None) -> TextOutput:
    """What every dry-run handler of a case returns."""
    return TextOutput(text=NO_RESULT if result is None else result)


def dry_run_registry(registry: ToolRegistry, result: str | None) -> ToolRegistry:
    """Every tool of `registry`, answering `result` instead of running."""
    output = canned(result)
    dry = ToolRegistry()
    for tool in registry:
        dry.register(dataclasses.replace(tool, output_model=TextOutput, handler=lambda data, ctx: output))
    return dry


def json_schema(schema: Any) -> Any:
    """A BFCL parameter schema as JSON Schema: `dict` -> object, `float` -> number,
    `tuple` -> array, `any` -> no type; everything below converted the same way."""
    if isinstance(schema, list):
        return [json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key in NOT_JSON_SCHEMA:
            continue
        if key == "type" and isinstance(value, str):
            if value != "any":
                converted[key] = BFCL_TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            converted[key] = {name: json_schema(spec) for name, spec in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            converted[key] = json_schema(value)
        else:
            converted[key] = value
    return converted


def function_registry(functions: tuple[dict[str, Any], ...], result: str | None) -> ToolRegistry:
    """A registry of a BFCL case's functions, each a dry-run command (generic binding)."""
    output = canned(result)
    registry = ToolRegistry()
    for function in functions:
        schema = json_schema(function.get("parameters") or {"type": "object"})
        schema.setdefault("type", "object")
        name, description = str(function["name"]), str(function.get("description") or "")
        registry.register(
            schema_tool(name, description, schema, lambda arguments, ctx: output, result_role=DRY_RUN_ROLE)
        )
    return registry


def dry_context() -> ToolContext:
    """The context a dry-run handler gets: nothing it could touch (an in-memory database)."""
    database = Database(":memory:")
    return ToolContext(conn=database.connect(), database=database, settings=Settings(), user_id=0)
