"""`Telemetry`: one value per app that components call where work worth seeing happens.

Spans follow the OpenTelemetry GenAI semantic conventions: a turn is `invoke_agent`, a
provider call is `chat {model}` (`gen_ai.provider.name`, `gen_ai.request.model`,
`gen_ai.response.model`, `gen_ai.usage.input_tokens` / `output_tokens`,
`gen_ai.response.finish_reasons`, a `gen_ai.first_token` event at the first piece of text and
`orchestrator.time_to_first_chunk_s`: the conventions name that time only as a metric),
a tool run is `execute_tool {tool}` (`gen_ai.tool.name`), and the judge and the storage
calls that matter get their own spans. Message text, tool input and tool output go into
attributes only when the operator opts in (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`).

With tracing off (no OTLP endpoint), `tracer` is None and each hook only counts its metrics:
no span, no context switch, no attribute is built.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import Any, ParamSpec, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode, Tracer

from observe.metrics import Metrics

P = ParamSpec("P")
R = TypeVar("R")
AGENT_NAME = "orchestrator"


class CompletionView(Protocol):
    """What a provider call reports (llm/base.py's `Completion`), read by name."""

    @property
    def text(self) -> str | None: ...
    @property
    def provider(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def failure(self) -> Enum | None: ...
    @property
    def first_text_ms(self) -> float | None: ...
    @property
    def usage(self) -> dict[str, int] | None: ...
    @property
    def finish_reason(self) -> str | None: ...


class ToolResultView(Protocol):
    """What a tool run reports (tools/base.py's `ToolResult`)."""

    @property
    def ok(self) -> bool: ...
    @property
    def error_code(self) -> Any: ...
    @property
    def text(self) -> str | None: ...


@dataclass
class TurnObservation:
    """The turn's outcome, set by the runner before the turn span ends."""

    span: Span
    outcome: str = "internal_error"


@dataclass
class ChatObservation:
    telemetry: Telemetry
    span: Span
    provider: str
    started: float

    def finish(self, completion: CompletionView) -> None:
        self.telemetry.provider_call_done(self.span, completion)


@dataclass
class ToolObservation:
    telemetry: Telemetry
    span: Span
    name: str

    def finish(self, result: ToolResultView) -> None:
        code = _code_text(result.error_code)
        self.telemetry.metrics.child(self.telemetry.metrics.tool_runs, self.name, "ok" if result.ok else code).inc()
        if self.span.is_recording():
            self.span.set_attribute("tool.ok", result.ok)
            if not result.ok:
                self.span.set_attribute("error.type", code)
                self.span.set_status(Status(StatusCode.ERROR))
            if self.telemetry.capture_content and result.text is not None:
                self.span.set_attribute("gen_ai.tool.call.result", result.text)


def _code_text(code: Any) -> str:
    return str(getattr(code, "value", code)) if code is not None else "error"


class Telemetry:
    """One app's tracer (None: tracing off), metrics and content-capture choice."""

    def __init__(
        self,
        metrics: Metrics,
        tracer: Tracer | None = None,
        *,
        capture_content: bool = False,
        shutdown: Callable[[], None] | None = None,
    ) -> None:
        self.metrics = metrics
        self.tracer = tracer
        self.capture_content = capture_content
        self._shutdown = shutdown

    @classmethod
    def off(cls) -> Telemetry:
        """No tracing; metrics counted in a registry of their own (tests, the CLI)."""
        return cls(Metrics())

    @property
    def tracing(self) -> bool:
        return self.tracer is not None

    def close(self) -> None:
        """Export the spans still buffered (the server is stopping)."""
        if self._shutdown is not None:
            self._shutdown()

    # spans --------------------------------------------------------------------------------

    @contextmanager
    def span(self, name: str, attributes: dict[str, Any], kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Span]:
        """A span made the current one (a child of whatever is current), or INVALID_SPAN when off."""
        if self.tracer is None:
            yield INVALID_SPAN
            return
        with self.tracer.start_as_current_span(name, kind=kind, attributes=attributes) as span:
            yield span

    def carry(self, work: Callable[P, R]) -> Callable[P, R]:
        """`work` to run on another thread inside the caller's trace (a turn on its worker)."""
        if self.tracer is None:
            return work
        captured = otel_context.get_current()

        def carried(*args: P.args, **kwargs: P.kwargs) -> R:
            token = otel_context.attach(captured)
            try:
                return work(*args, **kwargs)
            finally:
                otel_context.detach(token)

        return carried

    @contextmanager
    def turn(self, kind: str, session_id: str, turn_id: str) -> Iterator[TurnObservation]:
        """The span of one turn and its count and duration, by outcome (set by the caller)."""
        started = time.perf_counter()
        attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": AGENT_NAME,
            "gen_ai.conversation.id": session_id,
            "turn.id": turn_id,
            "turn.kind": kind,
        }
        with self.span(f"invoke_agent {AGENT_NAME}", attributes) as span:
            observed = TurnObservation(span)
            try:
                yield observed
            finally:
                self.metrics.child(self.metrics.turns, kind, observed.outcome).inc()
                self.metrics.child(self.metrics.turn_seconds, kind).observe(time.perf_counter() - started)
                if span.is_recording():
                    span.set_attribute("turn.outcome", observed.outcome)
                    if observed.outcome not in ("done", "stopped"):
                        span.set_attribute("error.type", observed.outcome)
                        span.set_status(Status(StatusCode.ERROR))

    @contextmanager
    def chat(
        self, provider: str, model: str, messages: Callable[[], Sequence[tuple[str, str]]]
    ) -> Iterator[ChatObservation]:
        """One provider call: `chat {model}`; `messages` (role, text) is read only to capture content."""
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider,
            "gen_ai.request.model": model,
        }
        with self.span(f"chat {model}", attributes, SpanKind.CLIENT) as span:
            if self.capture_content and span.is_recording():
                span.set_attribute("gen_ai.input.messages", _messages_json(messages()))
            yield ChatObservation(self, span, provider, time.perf_counter())

    def provider_skipped(self, completion: CompletionView) -> None:
        """A provider not called (its circuit is open): counted as its failure, no span."""
        self.provider_call_done(INVALID_SPAN, completion)

    def provider_call_done(self, span: Span, completion: CompletionView) -> None:
        """Count a provider call (a skipped one too: an open circuit) and describe it on its span."""
        metrics, provider = self.metrics, completion.provider
        failure = None if completion.failure is None else str(completion.failure.value)
        metrics.child(metrics.provider_calls, provider, "ok" if completion.text is not None else "failed").inc()
        if completion.text is None and failure is not None and failure != "cancelled":
            metrics.child(metrics.provider_failures, provider, failure).inc()
        if completion.first_text_ms is not None:
            metrics.child(metrics.first_token_seconds, provider).observe(completion.first_text_ms / 1000)
        usage = completion.usage or {}
        input_tokens, output_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if input_tokens is not None:
            metrics.child(metrics.tokens, provider, "input").inc(input_tokens)
        if output_tokens is not None:
            metrics.child(metrics.tokens, provider, "output").inc(output_tokens)
        if not span.is_recording():
            return
        span.set_attribute("gen_ai.response.model", completion.model)
        if input_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        if output_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        if completion.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [completion.finish_reason])
        if completion.first_text_ms is not None:
            span.set_attribute("orchestrator.time_to_first_chunk_s", completion.first_text_ms / 1000)
            start = getattr(span, "start_time", None)
            if isinstance(start, int):  # the SDK's span: the event at the moment the first text came
                span.add_event("gen_ai.first_token", timestamp=start + int(completion.first_text_ms * 1e6))
        if failure is not None:
            span.set_attribute("error.type", failure)
            if failure != "cancelled":
                span.set_status(Status(StatusCode.ERROR))
        if self.capture_content and completion.text is not None:
            span.set_attribute("gen_ai.output.messages", _messages_json([("assistant", completion.text)]))

    @contextmanager
    def tool(self, name: str, arguments: Callable[[], object]) -> Iterator[ToolObservation]:
        """One tool run: `execute_tool {name}`; `arguments` is read only to capture content."""
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        with self.span(f"execute_tool {name}", attributes) as span:
            if self.capture_content and span.is_recording():
                span.set_attribute("gen_ai.tool.call.arguments", json.dumps(arguments(), default=str))
            yield ToolObservation(self, span, name)

    @contextmanager
    def judge_run(self, language: str) -> Iterator[Span]:
        """One run of the code judge, its wait for a place included."""
        with self.span(f"judge {language}", {"judge.language": language}) as span:
            yield span

    @contextmanager
    def storage(self, operation: str, system: str) -> Iterator[Span]:
        """A storage call that matters (a model's SQL, a search): `db.operation.name` on `db.system.name`."""
        with self.span(
            f"{operation} {system}", {"db.system.name": system, "db.operation.name": operation}, SpanKind.CLIENT
        ) as span:
            yield span

    # counts -------------------------------------------------------------------------------

    def rate_limited(self, budget: str) -> None:
        self.metrics.child(self.metrics.rate_limited, budget).inc()

    def stream_opened(self) -> None:
        self.metrics.open_streams.inc()

    def stream_closed(self) -> None:
        self.metrics.open_streams.dec()


def _messages_json(messages: Sequence[tuple[str, str]]) -> str:
    """The GenAI conventions' message shape: role and text parts."""
    return json.dumps(
        [{"role": role, "parts": [{"type": "text", "content": text}]} for role, text in messages], ensure_ascii=False
    )


def current_ids() -> tuple[str, str] | None:
    """The current span's trace and span ids in hex, or None outside any span."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"
