"""A real server started with `OTEL_EXPORTER_OTLP_ENDPOINT` posts its spans over OTLP/HTTP to a
loopback receiver (SPEC 16), which decodes them with the OpenTelemetry protocol's own messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import requests

from testing.fake_llm import FakeLLMServer
from testing.waiting import wait_until
from tests.otlp_support import Receiver
from tests.process_support import ROOT, clean_env, free_port, stop_process, wait_until_serving

pytestmark = pytest.mark.slow
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


def test_a_real_server_exports_its_turn_spans_to_the_otlp_endpoint(tmp_path: Path, base_settings, receiver: Receiver):
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
