"""The tracer, built from the standard OTLP settings, or none (tracing off).

`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is the full URL spans are posted to;
`OTEL_EXPORTER_OTLP_ENDPOINT` is a base URL to which `/v1/traces` is added (the OpenTelemetry
specification's rule for OTLP over HTTP). Headers are `key=value` pairs separated by commas,
values URL-encoded. Spans leave in batches from a background thread (the SDK's
`BatchSpanProcessor`, tuned by the standard `OTEL_BSP_*` variables), so a turn never waits
for the collector; what is still buffered is sent when the server stops.

The tracer provider is this app's own, never installed as the process's global one: two
apps in one process (tests) trace apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

from observe.metrics import Metrics
from observe.telemetry import Telemetry

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class TracingConfig:
    """The settings that shape tracing (config/settings.py names them after the standard variables)."""

    endpoint: str | None = None  # OTEL_EXPORTER_OTLP_ENDPOINT
    traces_endpoint: str | None = None  # OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    headers: str | None = None  # OTEL_EXPORTER_OTLP_HEADERS (or _TRACES_HEADERS)
    timeout_s: float = 10.0
    service_name: str = "orchestrator"
    capture_content: bool = False

    @property
    def traces_url(self) -> str | None:
        if self.traces_endpoint:
            return self.traces_endpoint
        if self.endpoint:
            return self.endpoint.rstrip("/") + TRACES_PATH
        return None


def parse_headers(text: str | None) -> dict[str, str]:
    """`k1=v1,k2=v2` (values URL-encoded) as a dict; a pair without `=` is a mistake worth naming."""
    headers: dict[str, str] = {}
    for pair in (text or "").split(","):
        if not pair.strip():
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"bad OTLP header {pair.strip()!r}: use key=value pairs separated by commas")
        headers[unquote(key.strip()).lower()] = unquote(value.strip())
    return headers


def build_telemetry(config: TracingConfig, exporter: SpanExporter | None = None) -> Telemetry:
    """Tracing on when an OTLP endpoint is set (or a test hands an `exporter`), else off."""
    url = config.traces_url
    if exporter is None and url is None:
        return Telemetry(Metrics(), capture_content=config.capture_content)
    provider = TracerProvider(resource=Resource.create({"service.name": config.service_name}))
    if exporter is not None:  # a test's in-memory exporter: each span as it ends
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        otlp = OTLPSpanExporter(endpoint=url, headers=parse_headers(config.headers), timeout=config.timeout_s)
        provider.add_span_processor(BatchSpanProcessor(otlp))
    return Telemetry(
        Metrics(),
        provider.get_tracer("orchestrator"),
        capture_content=config.capture_content,
        shutdown=provider.shutdown,
    )
