"""Traces of a tool turn through the real app (SPEC 16), caught by the SDK's in-memory exporter:
the turn, each provider call and the tool are spans with the GenAI conventions' attributes,
linked parent to child under the caller's `traceparent`; no text unless the operator opts in."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask import Flask
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app import create_app
from config.settings import Settings
from observe.tracing import TracingConfig, build_telemetry
from testing.fake_llm import FakeLLMServer
from tests.conftest import new_token

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
SECRET_WORDS = "my cat is called Whiskers"


@pytest.fixture
def traced(
    base_settings: dict[str, Any], fake_llm: FakeLLMServer
) -> Iterator[Callable[..., tuple[Flask, InMemorySpanExporter]]]:
    built: list[Flask] = []

    def build(capture: bool = False) -> tuple[Flask, InMemorySpanExporter]:
        exporter = InMemorySpanExporter()
        telemetry = build_telemetry(TracingConfig(capture_content=capture), exporter=exporter)
        app = create_app(Settings(**{**base_settings, "llm_base_url": fake_llm.openai_base_url}), telemetry)
        built.append(app)
        return app, exporter

    yield build
    for app in built:
        from api.services import services_of

        services_of(app).database.close()


def tool_turn(app: Flask, fake_llm: FakeLLMServer, exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    fake_llm.queue(f"/remember {SECRET_WORDS}", "Noted: your cat's name.")
    headers = {"Authorization": f"Bearer {new_token(app)}", "traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    answer = app.test_client().post("/chat", json={"message": f"remember: {SECRET_WORDS}"}, headers=headers)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return list(exporter.get_finished_spans())


def named(spans: list[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name.startswith(prefix)]


def all_attribute_text(spans: list[ReadableSpan]) -> str:
    return " ".join(str(value) for span in spans for value in (span.attributes or {}).values())


def test_a_tool_turn_is_a_tree_of_genai_spans_under_the_callers_traceparent(traced, fake_llm):
    app, exporter = traced()
    spans = tool_turn(app, fake_llm, exporter)
    (request,) = named(spans, "POST /chat")
    (turn,) = named(spans, "invoke_agent")
    chats = named(spans, "chat test-model")
    (tool,) = named(spans, "execute_tool remember")
    assert len(chats) == 2  # the pass that asked for the tool, the pass that answered
    # every span is in the caller's trace; the request's parent is the caller's span
    assert {f"{span.context.trace_id:032x}" for span in spans} == {TRACE_ID}
    assert request.parent is not None and f"{request.parent.span_id:016x}" == PARENT_ID
    assert turn.parent is not None and turn.parent.span_id == request.context.span_id  # across the worker thread
    for child in (*chats, tool):
        assert child.parent is not None and child.parent.span_id == turn.context.span_id
    assert turn.attributes is not None and turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["turn.outcome"] == "done"
    for chat in chats:
        attributes = chat.attributes or {}
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "openai"
        assert attributes["gen_ai.request.model"] == "test-model"
        assert attributes["gen_ai.response.model"] == "test-model"
        assert isinstance(attributes["gen_ai.usage.input_tokens"], int) and attributes["gen_ai.usage.input_tokens"] > 0
        assert attributes["gen_ai.usage.output_tokens"] > 0
        assert tuple(attributes["gen_ai.response.finish_reasons"]) == ("stop",)
        assert [event.name for event in chat.events] == ["gen_ai.first_token"]
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "remember" and tool.attributes["tool.ok"] is True
    assert "Whiskers" not in all_attribute_text(spans)  # no message text by default


def test_message_text_is_in_the_spans_only_when_the_operator_opts_in(traced, fake_llm):
    app, exporter = traced(capture=True)
    spans = tool_turn(app, fake_llm, exporter)
    first, _ = named(spans, "chat test-model")
    (tool,) = named(spans, "execute_tool remember")
    assert SECRET_WORDS in str((first.attributes or {})["gen_ai.input.messages"])
    assert SECRET_WORDS in str((first.attributes or {})["gen_ai.output.messages"])
    assert SECRET_WORDS in str((tool.attributes or {})["gen_ai.tool.call.arguments"])


def test_a_storage_call_that_matters_is_a_span_inside_its_tool(traced, fake_llm):
    app, exporter = traced()
    fake_llm.queue("/memory_search cat", "Nothing found.")
    answer = app.test_client().post(
        "/chat", json={"message": "what about my cat?"}, headers={"Authorization": f"Bearer {new_token(app)}"}
    )
    assert answer.status_code == 200
    spans = list(exporter.get_finished_spans())
    (tool,) = named(spans, "execute_tool memory_search")
    (search,) = named(spans, "search sqlite")
    assert search.parent is not None and search.parent.span_id == tool.context.span_id
    assert (search.attributes or {})["db.system.name"] == "sqlite"


def test_tracing_off_installs_no_request_hook_and_makes_no_span(make_app):
    app = make_app()
    from api.services import services_of

    assert services_of(app).telemetry.tracer is None
    assert not any("start_span" in getattr(hook, "__name__", "") for hook in app.before_request_funcs.get(None, []))


@pytest.mark.docker
def test_a_judge_run_is_a_span_of_its_language():
    from judge.models import Limits
    from tests.judge_support import open_judge, run_python

    exporter = InMemorySpanExporter()
    telemetry = build_telemetry(TracingConfig(), exporter=exporter)
    for judge in open_judge(telemetry=telemetry):
        assert run_python(judge, "print(6 * 7)", Limits()).stdout.strip() == "42"
    (span,) = named(list(exporter.get_finished_spans()), "judge python")
    assert (span.attributes or {})["judge.language"] == "python"


def test_scrapes_and_health_probes_make_no_span(traced):
    app, exporter = traced()
    client = app.test_client()
    for path in ("/health/live", "/health", "/metrics"):
        client.get(path)
    client.get("/api/me")
    assert [span.name for span in exporter.get_finished_spans()] == ["GET /api/me"]
