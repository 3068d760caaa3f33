"""The same case through the provider's native function calling (`app.py eval --native`).

The yardstick our text protocol is measured against, on the same model and cases: the case's
conversation under the persona alone, the case's commands sent as OpenAI `tools` (each tool's
`function_schema`, the schemas `GET /tools` serves), `tool_choice: "auto"`, one whole (not
streamed) reply. A `tool_calls` entry is the call, read and validated as the router would
(`tool.input_model`); a reply with content and no call is a plain answer. Only the first pass
is scored: what the card compares is whether and what the model calls.

This is the only place the product sends a `tools` field, and only here, in a measurement: a
chat turn never does (SPEC 6.3).
"""

from __future__ import annotations

import json
import time
from typing import Any

import requests
from pydantic import ValidationError

from evaluation.cases import Case
from evaluation.run import Call, CaseRun, Option, PassStats, case_registry
from llm.wire import error_message
from pipeline.catalog import EVERYTHING, offered
from pipeline.prompt import DEFAULT_PERSONA
from providers import FallbackChain, HttpProvider
from tools.generic import SchemaInput
from tools.registry import ToolRegistry

LONG_BOUND = 256  # a `maxLength` past this is left out of what native calling is sent (below)


def without_long_bounds(schema: Any) -> Any:
    """`schema` without `maxLength`/`minLength` bounds past `LONG_BOUND`. llama-cpp-python's
    native calling writes a grammar from each schema, spelling a bound out as that many nested
    repetitions: `/remember`'s `fact` (at most 2,000 characters) makes it fail to parse the
    grammar, and the server then dies (SIGSEGV, measured 2026-12-02). The bound changes nothing
    a short call says; our text protocol checks it when the command is routed."""
    if isinstance(schema, dict):
        return {
            key: without_long_bounds(value)
            for key, value in schema.items()
            if not (key in ("maxLength", "minLength") and isinstance(value, int) and value > LONG_BOUND)
        }
    if isinstance(schema, list):
        return [without_long_bounds(item) for item in schema]
    return schema


def native_body(provider: HttpProvider, case: Case, registry: ToolRegistry) -> dict[str, Any]:
    messages = [{"role": "system", "content": case.persona or DEFAULT_PERSONA}]
    messages += [{"role": role, "content": content} for role, content in case.messages]
    return {
        "model": provider.model,
        "messages": messages,
        "tools": [without_long_bounds(tool.function_schema()) for tool in offered(registry, EVERYTHING)],
        "tool_choice": "auto",
        "stream": False,
        "max_tokens": provider.config.max_tokens,
        **provider.config.sampling(),
    }


def read_tool_call(raw: dict[str, Any], registry: ToolRegistry) -> Call:
    function = raw.get("function") or {}
    name = str(function.get("name", ""))
    arguments = function.get("arguments") or "{}"
    line = f"{name}({arguments if isinstance(arguments, str) else json.dumps(arguments)})"
    tool = registry.get(name) or registry.for_command(name)
    if tool is None or tool.command is None:
        return Call(name, line, False, None, "not a function of the list")
    try:
        given = json.loads(arguments) if isinstance(arguments, str) else arguments
        data = tool.input_model.model_validate(given)
    except (ValueError, ValidationError) as error:
        return Call(tool.command.name, line, True, None, str(error).splitlines()[0])
    args = data.arguments() if isinstance(data, SchemaInput) else data.model_dump(mode="json")
    return Call(tool.command.name, line, True, args)


def run_native(
    case: Case, chain: FallbackChain, option: Option, tools: ToolRegistry, native_url: str | None = None
) -> CaseRun:
    """One case through `tools` (never raises for a model's or a server's failure), posted to
    the chain's first provider, or to `native_url` (a server whose chat format reads `tools`:
    llama-cpp-python's `chatml-function-calling`, `app.py eval --native-base-url`)."""
    provider = chain.primary
    if not isinstance(provider, HttpProvider) or not provider.reads_odds:
        return CaseRun(case, option, failure=f"native function calling: {provider.name} does not speak OpenAI's wire")
    try:
        registry = case_registry(case, tools)
    except Exception as error:  # a BFCL function that cannot be a command (two with one name...)
        return CaseRun(case, option, failure=f"the case's functions cannot be commands: {error}")
    started = time.perf_counter()
    try:
        response = provider.http.post(
            native_url or provider.endpoint(),
            json=native_body(provider, case, registry),
            headers=provider.headers(),
            timeout=provider.config.timeout_s,
        )
        data = response.json()
    except (requests.RequestException, ValueError) as error:
        return CaseRun(case, option, failure=f"provider: {type(error).__name__}")
    if response.status_code >= 400 or not isinstance(data, dict):
        said = error_message(data) or "no message"
        return CaseRun(case, option, failure=f"provider: HTTP {response.status_code}: {said[:120]}")
    try:
        message = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return CaseRun(case, option, failure="provider: no choices[0].message")
    elapsed = (time.perf_counter() - started) * 1000
    stats = PassStats(elapsed, int((data.get("usage") or {}).get("completion_tokens") or 0), elapsed / 1000)
    calls = message.get("tool_calls") or []
    if calls:
        call = read_tool_call(calls[0], registry)
        return CaseRun(case, option, reply=call.line, call=call, passes=(stats,), first_pass_ms=elapsed)
    content = message.get("content")
    if not isinstance(content, str) or not content.strip():
        return CaseRun(case, option, passes=(stats,), failure="provider: empty", first_pass_ms=elapsed)
    return CaseRun(case, option, reply=content, answer=content, passes=(stats,), first_pass_ms=elapsed)
