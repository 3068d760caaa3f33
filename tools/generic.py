"""The generic binding (SPEC 5): a tool known only by its JSON schema, called as a `/command`.

Tools that come with no hand-written `CommandBinding` (an MCP server's tools, the functions of
an evaluation case) get one from their input schema:

- exactly one required string property: the argument text is that property
  (`/time_get_current_time Europe/Paris`); the command takes no body;
- anything else: one JSON object, after the name on the first line or as the body
  (`/get_weather {"city": "Paris", "unit": "celsius"}`).

The arguments are validated against the schema itself (the `jsonschema` library, the schema's
own draft) before the call, through the same `run_tool` path as every tool: a wrong call is a
VALIDATION_FAILED result naming each bad field, with the usage and an example, both generated
here from the schema, so the model sees the expected shape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import jsonschema
from pydantic import ConfigDict, GetJsonSchemaHandler, ValidationError, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema

from tools.base import (
    NEVER_ASKS,
    Approval,
    BindingError,
    CommandBinding,
    Tool,
    ToolContext,
    ToolHints,
    ToolInput,
    ToolOrigin,
    ToolOutput,
)

MAX_SCHEMA_ERRORS = 20  # one answer, not thousands of lines, for a huge wrong object
_EXAMPLE_IN_TEXT = re.compile(r"""(?:e\.g\.|for example|such as)[,:]?\s*\(?['"`]([^'"`\n]{1,60})['"`]""", re.IGNORECASE)
_NAME_CHARS = re.compile(r"[^a-z0-9_]")


def command_name(name: str, prefix: str = "") -> str:
    """A command name from a tool's name (SPEC 14): lower-cased, anything outside
    `[a-z0-9_]` replaced by `_`, and a leading letter guaranteed (the detector's rule)."""
    cleaned = _NAME_CHARS.sub("_", f"{prefix}{name}".lower())
    return cleaned if cleaned[:1].isalpha() else f"t_{cleaned}"


class SchemaInput(ToolInput):
    """Input of a schema-only tool: any object the schema accepts, kept as given.

    Subclasses (made by `schema_input_model`) carry their schema; validation is the schema's
    own, and `model_json_schema()` publishes it unchanged (`GET /tools`, `/openapi.json`)."""

    model_config = ConfigDict(extra="allow", frozen=True, str_strip_whitespace=False)
    input_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    @model_validator(mode="before")
    @classmethod
    def _match_the_schema(cls, data: Any) -> Any:
        problems = list(schema_problems(cls.input_schema, data))
        if problems:
            raise ValidationError.from_exception_data(cls.__name__, problems)
        return data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return dict(cls.input_schema)

    def arguments(self) -> dict[str, Any]:
        """The validated arguments, as the caller sent them."""
        return dict(self.model_extra or {})


def schema_problems(schema: dict[str, Any], data: Any) -> Iterator[InitErrorDetails]:
    """Each way `data` breaks `schema`, located at the field it concerns."""
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    errors = sorted(validator_class(schema).iter_errors(data), key=lambda error: list(error.absolute_path))
    for error in errors[:MAX_SCHEMA_ERRORS]:
        path = tuple(error.absolute_path)
        required = error.validator_value if isinstance(error.validator_value, list) else []
        if error.validator == "required" and isinstance(error.instance, dict):
            for missing in required:
                if missing not in error.instance:
                    yield problem((*path, missing), "Field required", None)
        elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
            known = set(error.schema.get("properties", {})) if isinstance(error.schema, dict) else set()
            for extra in error.instance:
                if extra not in known:
                    yield problem((*path, extra), "Extra inputs are not permitted", error.instance[extra])
        else:
            yield problem(path or ("input",), error.message, error.instance)


def problem(loc: tuple[str | int, ...], message: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(
        type=PydanticCustomError("json_schema", "{message}", {"message": message[:300]}), loc=loc, input=value
    )


def schema_input_model(tool_name: str, schema: dict[str, Any]) -> type[SchemaInput]:
    """A `SchemaInput` class for one tool's schema (checked to be a valid schema first)."""
    jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    class_name = "".join(part.title() for part in command_name(tool_name).split("_")) + "Input"
    model: type[SchemaInput] = type(class_name, (SchemaInput,), {"input_schema": schema, "__module__": __name__})
    return model


def the_one_string(schema: dict[str, Any]) -> str | None:
    """The property that takes the argument text: the only required one, when it is a string."""
    required = schema.get("required") or []
    if len(required) != 1:
        return None
    spec = (schema.get("properties") or {}).get(required[0]) or {}
    return str(required[0]) if spec.get("type") == "string" else None


def sample_value(name: str, spec: dict[str, Any]) -> Any:
    """A plausible value for a property, from what its schema says (never invented per tool)."""
    for key in ("examples", "enum"):
        values = spec.get(key)
        if isinstance(values, list) and values:
            return values[0]
    if "default" in spec and spec["default"] is not None:
        return spec["default"]
    if "const" in spec:
        return spec["const"]
    match = _EXAMPLE_IN_TEXT.search(str(spec.get("description") or ""))
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if match and kind in (None, "string"):
        return match.group(1)
    samples: dict[str, Callable[[], Any]] = {
        "integer": lambda: 1,
        "number": lambda: 1.5,
        "boolean": lambda: True,
        "array": lambda: [sample_value(name, spec.get("items") or {"type": "string"})],
        "object": lambda: sample_object(spec),
        "null": lambda: None,
    }
    if kind in samples:
        return samples[kind]()
    formats = {
        "date": "2025-01-31",
        "date-time": "2025-01-31T12:00:00Z",
        "uri": "https://example.org",
        "email": "a@example.org",
    }
    return formats.get(str(spec.get("format")), name.replace("_", " "))


def sample_object(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    return {name: sample_value(name, properties.get(name) or {}) for name in schema.get("required") or []}


def type_label(spec: dict[str, Any]) -> str:
    """`<string>`, `<string|null>` (a list of types, or pydantic's `anyOf` of an optional field),
    or the enum's values."""
    if "enum" in spec:
        return "|".join(json.dumps(value) for value in spec["enum"][:6])
    kind = spec.get("type")
    if isinstance(kind, list):
        kind = "|".join(str(k) for k in kind)
    elif kind is None:
        branches = spec.get("anyOf") or spec.get("oneOf") or []
        kinds = [str(branch.get("type")) for branch in branches if isinstance(branch, dict) and branch.get("type")]
        kind = "|".join(dict.fromkeys(kinds)) or None
    return f"<{kind or 'any'}>"


def json_usage(name: str, schema: dict[str, Any]) -> str:
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields = [f'"{key}"{"" if key in required else "?"}: {type_label(spec or {})}' for key, spec in properties.items()]
    return f"/{name} {{{', '.join(fields)}}}"


def generic_binding(name: str, schema: dict[str, Any], request: str = "") -> CommandBinding:
    """The command binding SPEC 5 gives a tool that has none, from its input schema; `request`
    (the tool's description, by default) is what a demonstration's user asks for."""
    text_field = the_one_string(schema)
    if text_field is not None:
        spec = (schema.get("properties") or {})[text_field] or {}
        return CommandBinding(
            name=name,
            usage=f"/{name} <{text_field}>",
            example=f"/{name} {sample_value(text_field, spec)}",
            args_field=text_field,
            request=request,
        )
    return CommandBinding(
        name=name,
        usage=json_usage(name, schema),
        example=f"/{name} {json.dumps(sample_object(schema), ensure_ascii=False)}",
        parse=json_arguments,
        request=request,
    )


def json_arguments(args: str, body: str) -> dict[str, Any]:
    """One JSON object, on the first line after the name or as the body."""
    text = args.strip() or body.strip()
    if not text:
        return {}  # the schema says which fields were required
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise BindingError(f"the arguments are not one JSON object ({error.msg} at column {error.colno})") from None
    if not isinstance(value, dict):
        raise BindingError("the arguments must be one JSON object, not a " + type(value).__name__)
    return value


class TextOutput(ToolOutput):
    """What a schema-only tool answers when it has no output model of its own: text, and the
    structured value when there is one."""

    text: str
    data: Any = None

    def render(self) -> str:
        return self.text


def schema_tool(
    name: str,
    description: str,
    schema: dict[str, Any],
    call: Callable[[dict[str, Any], ToolContext], TextOutput],
    *,
    result_role: str,
    command: str | None = None,
    timeout_s: float = 30.0,
    budget: str | None = None,
    output_model: type[TextOutput] = TextOutput,
    annotations: ToolHints | None = None,
    approval: Approval = NEVER_ASKS,
    origin: ToolOrigin = "builtin",
) -> Tool[SchemaInput, TextOutput]:
    """A `Tool` unit for a tool known by its JSON schema, with the generic binding; `call`
    may answer a subclass of `TextOutput` (`output_model`, what `/openapi.json` documents)."""

    def handler(data: SchemaInput, ctx: ToolContext) -> TextOutput:
        return call(data.arguments(), ctx)

    return Tool(
        name=name,
        description=description,
        input_model=schema_input_model(name, schema),
        output_model=output_model,
        handler=handler,
        result_role=result_role,
        command=generic_binding(command or command_name(name), schema, request=description),
        timeout_s=timeout_s,
        budget=budget,
        annotations=annotations,
        approval=approval,
        origin=origin,
    )
