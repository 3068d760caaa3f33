"""What the observability hooks (SPEC 16, `observe/`) cost a turn, tracing off and on.

A tool turn calls the hooks of one turn, two provider calls and one tool run, and counts
their metrics. This runs exactly those hooks, with completions and results shaped like the
real ones, many times over, and reports CPU microseconds per turn (`time.process_time`, so
other processes on a busy machine do not count), with:

  off      no OTLP endpoint: no tracer; only the Prometheus counters and histograms
  on       a tracer whose spans go through the SDK's BatchSpanProcessor to an exporter that
           drops them (the work a real export adds happens on the SDK's own thread)
  capture  on, plus message text in the spans (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)

    .venv/bin/python bench/telemetry_overhead.py [--turns 20000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from observe.telemetry import Telemetry  # noqa: E402
from observe.tracing import TracingConfig, build_telemetry  # noqa: E402


class Kind(Enum):
    CONNECTION = "connection"


@dataclass(frozen=True)
class Completion:
    text: str | None = "Noted."
    provider: str = "openai"
    model: str = "m"
    failure: Kind | None = None
    first_text_ms: float | None = 12.5
    usage: dict[str, int] | None = None
    finish_reason: str | None = "stop"


@dataclass(frozen=True)
class Result:
    ok: bool = True
    error_code: str | None = None
    text: str | None = "Remembered: likes tea."


class Dropping(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


MESSAGES = [("system", "You are helpful. " * 50), ("user", "I like tea")]


def one_turn(telemetry: Telemetry, completion: Completion, result: Result) -> None:
    with telemetry.turn("chat", "s_1", "turn_1") as observed:
        with telemetry.chat("openai", "m", lambda: MESSAGES) as call:
            call.finish(completion)
        with telemetry.tool("remember", lambda: {"fact": "likes tea"}) as tool:
            tool.finish(result)
        with telemetry.chat("openai", "m", lambda: MESSAGES) as call:
            call.finish(completion)
        observed.outcome = "done"


def per_turn_us(telemetry: Telemetry, turns: int) -> float:
    completion = Completion(usage={"prompt_tokens": 812, "completion_tokens": 4})
    result = Result()
    for _ in range(200):  # warm-up: label children created, code paths hot
        one_turn(telemetry, completion, result)
    started = time.process_time()
    for _ in range(turns):
        one_turn(telemetry, completion, result)
    return (time.process_time() - started) / turns * 1e6


def traced(capture: bool) -> Telemetry:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from observe.metrics import Metrics

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    return Telemetry(Metrics(), provider.get_tracer("bench"), capture_content=capture, shutdown=provider.shutdown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20000)
    args = parser.parse_args()
    variants = {
        "off": build_telemetry(TracingConfig()),
        "on": traced(capture=False),
        "capture": traced(capture=True),
    }
    for name, telemetry in variants.items():
        figures = sorted(per_turn_us(telemetry, args.turns) for _ in range(3))
        print(f"{name:8} {figures[1]:8.1f} us CPU per tool turn (median of 3 runs of {args.turns})")
        telemetry.close()


if __name__ == "__main__":
    main()
