"""A loopback OTLP/HTTP receiver for the tracing tests: it decodes each export with the
OpenTelemetry protocol's own protobuf messages and keeps the spans and headers it saw."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


class Receiver(ThreadingHTTPServer):
    """Collects each export's spans (name, trace id, attributes) and the headers it came with."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ReceiverHandler)
        self.spans: list[dict[str, object]] = []
        self.headers_seen: list[dict[str, str]] = []
        self.services: set[str] = set()
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class ReceiverHandler(BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        with self.server.lock:
            self.server.headers_seen.append({key.lower(): value for key, value in self.headers.items()})
            for resource_spans in export.resource_spans:
                for attribute in resource_spans.resource.attributes:
                    if attribute.key == "service.name":
                        self.server.services.add(attribute.value.string_value)
                for scope in resource_spans.scope_spans:
                    for span in scope.spans:
                        self.server.spans.append(
                            {
                                "path": self.path,
                                "name": span.name,
                                "trace_id": span.trace_id.hex(),
                                "attributes": {a.key: a.value for a in span.attributes},
                            }
                        )
        answer = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
