"""A real server started with `OTEL_EXPORTER_OTLP_ENDPOINT` posts its spans over OTLP/HTTP to a
loopback receiver (SPEC 16), which decodes them with the OpenTelemetry protocol's own messages."""

from __future__ import annotations

import gzip
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from testing.fake_llm import FakeLLMServer
from testing.waiting import wait_until
from tests.process_support import ROOT, clean_env, free_port, stop_process, wait_until_serving

pytestmark = pytest.mark.slow
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


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


def test_a_real_server_exports_its_turn_spans_to_the_otlp_endpoint(tmp_path: Path, base_settings, receiver):
    with FakeLLMServer(default_reply="Hello.") as llm:
        port = free_port()
        env = clean_env(
            tmp_path,
            base_settings,
            PORT=str(port),
            LLM_PROVIDER="openai",
            LLM_BASE_URL=llm.openai_base_url,
            LLM_MODEL="m",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_OTLP_HEADERS="x-collector-key=open%20sesame",
            OTEL_SERVICE_NAME="chat-under-test",
            OTEL_BSP_SCHEDULE_DELAY="100",  # the SDK's own batch delay (ms): spans leave soon after they end
        )
        log_path = tmp_path / "server.log"
        log = log_path.open("w")
        process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_serving(process, f"http://127.0.0.1:{port}/health/live", log_path)
            token = Path(base_settings["auth_token_file"]).read_text().strip()
            llm.queue("/remember likes tea", "Noted.")
            answer = requests.post(
                f"http://127.0.0.1:{port}/chat",
                json={"message": "I like tea"},
                headers={"Authorization": f"Bearer {token}", "traceparent": f"00-{TRACE_ID}-b7ad6b7169203331-01"},
                timeout=30,
            )
            assert answer.status_code == 200

            def turn_spans() -> list[dict[str, object]]:
                with receiver.lock:
                    return [span for span in receiver.spans if span["trace_id"] == TRACE_ID]

            wait_until(lambda: len(turn_spans()) >= 5, "the spans of the turn never reached the receiver", 30)
        finally:
            stop_process(process, log)
    names = sorted(str(span["name"]) for span in turn_spans())
    assert names == sorted(["POST /chat", "invoke_agent orchestrator", "chat m", "chat m", "execute_tool remember"])
    assert {span["path"] for span in turn_spans()} == {"/v1/traces"}
    (tool,) = [span for span in turn_spans() if span["name"] == "execute_tool remember"]
    attributes = tool["attributes"]
    assert isinstance(attributes, dict) and attributes["gen_ai.tool.name"].string_value == "remember"
    assert receiver.services == {"chat-under-test"}
    assert all(headers.get("x-collector-key") == "open sesame" for headers in receiver.headers_seen)
