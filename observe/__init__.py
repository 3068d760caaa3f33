"""Seeing inside a running server with the tools operators already run (SPEC 16).

- `telemetry`: `Telemetry`, one per app, handed to the components that do work worth seeing
  (the turn runner, the provider chain, the tool router, the judge, the storage calls that
  matter). It opens OpenTelemetry spans named and attributed after the GenAI semantic
  conventions (`gen_ai.*`) and counts into the app's Prometheus metrics.
- `metrics`: `Metrics`, the app's own `prometheus_client` registry and its instruments;
  gauges of queues and circuits are read when `/metrics` is scraped, not kept up to date.
- `tracing`: building the tracer from the standard `OTEL_EXPORTER_OTLP_*` settings; with none
  set, tracing is off and every hook is a check of one attribute.
- `logs`: JSON log lines carrying the current trace and span ids (`LOG_FORMAT=json`).

This package imports nothing of the product: components pass it plain values, so every
floor may use it.
"""
