"""`GET /metrics` (Prometheus text) and the trace of each request (SPEC 16).

`/metrics` is off unless the operator asks: with `METRICS_TOKEN` set it wants
`Authorization: Bearer <token>` (401 `unauthorized` otherwise); with `METRICS_OPEN=1` it
answers anyone; with neither it answers 404, as if it did not exist. It is this process's
metrics only (`observe/metrics.py`).

With tracing on, each request is a server span whose parent is the caller's W3C
`traceparent` (and `tracestate`), current while its view runs, so the turn it starts on a
worker (`live/runner.py`) belongs to the caller's trace; `/metrics` and the health probes are
not traced. With tracing off no hook is installed.
"""

from __future__ import annotations

import hmac

from flask import Blueprint, Flask, Response, g, request
from flask.typing import ResponseReturnValue
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract

from api.declare import Reply, operation
from api.errors import ApiError, not_found
from api.services import services, services_of

bp = Blueprint("observe", __name__)
PROMETHEUS_TEXT = "text/plain; version=0.0.4"
#: Scrapes and probes, every few seconds from every monitor: spans of them would bury the turns.
UNTRACED = frozenset({"/metrics", "/health", "/health/live", "/health/ready"})


@bp.get("/metrics")
@operation(
    "This process's metrics in Prometheus' text format",
    auth=False,
    description="Off (404) unless `METRICS_TOKEN` or `METRICS_OPEN=1` is set; with a token, "
    "`Authorization: Bearer <METRICS_TOKEN>` is required.",
    replies={
        200: Reply("the metrics", media=(PROMETHEUS_TEXT,)),
        401: Reply("no or a wrong bearer token"),
        404: Reply("metrics are off on this server"),
    },
)
def metrics() -> ResponseReturnValue:
    found = services()
    settings = found.settings
    if settings.metrics_token:
        given = request.headers.get("Authorization", "")
        wanted = f"Bearer {settings.metrics_token}"
        if not hmac.compare_digest(given.encode(), wanted.encode()):
            raise ApiError(401, "unauthorized", "GET /metrics needs Authorization: Bearer <METRICS_TOKEN>")
    elif not settings.metrics_open:
        raise not_found("metrics")
    body, content_type = found.telemetry.metrics.exposition()
    return Response(body, content_type=content_type)


def init_app(app: Flask) -> None:
    """Trace each request when tracing is on (nothing is installed when it is off)."""
    telemetry = services_of(app).telemetry
    if telemetry.tracer is None:
        return
    tracer = telemetry.tracer

    @app.before_request
    def start_span() -> None:
        if request.path in UNTRACED:
            return
        rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
        span = tracer.start_span(
            f"{request.method} {rule}",
            context=extract(request.headers),
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": request.method, "http.route": rule},
        )
        g.otel_span = span
        g.otel_token = otel_context.attach(trace.set_span_in_context(span))

    @app.after_request
    def status(response: Response) -> Response:
        span = g.get("otel_span")
        if span is not None:
            span.set_attribute("http.response.status_code", response.status_code)
            if response.status_code >= 500:
                span.set_status(trace.Status(trace.StatusCode.ERROR))
        return response

    @app.teardown_request
    def end_span(_: BaseException | None) -> None:
        span, token = g.pop("otel_span", None), g.pop("otel_token", None)
        if token is not None:
            otel_context.detach(token)
        if span is not None:
            span.end()
