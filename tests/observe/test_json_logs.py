"""`LOG_FORMAT=json` (SPEC 16): a real server writes JSON lines, and a line written inside a
traced turn carries the caller's trace id, the one its spans were exported with."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import requests
from opentelemetry.sdk.trace import TracerProvider

from observe.logs import JsonLines
from testing.waiting import wait_until
from tests.otlp_support import Receiver
from tests.process_support import ROOT, clean_env, free_port, stop_process, wait_until_serving

TRACE_ID = "5b8efff798038103d269b633813fc60c"


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("turns", logging.WARNING, __file__, 1, message, None, None)


def test_a_line_outside_any_span_has_no_trace_id_and_one_inside_has_its_span():
    assert json.loads(JsonLines().format(record("outside"))).keys() == {"time", "level", "logger", "message"}
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("inside") as span:
        line = json.loads(JsonLines().format(record("inside")))
    assert line["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert line["span_id"] == f"{span.get_span_context().span_id:016x}"
    assert line["message"] == "inside" and line["level"] == "WARNING"


@pytest.mark.slow
def test_a_real_server_logs_json_lines_carrying_the_callers_trace_id(tmp_path: Path, base_settings, receiver: Receiver):
    port = free_port()
    env = clean_env(
        tmp_path,
        base_settings,
        PORT=str(port),
        LLM_PROVIDER="openai",
        LLM_BASE_URL="http://127.0.0.1:9/v1",  # nothing listens: the call fails and says so in the log
        LLM_MODEL="m",
        LOG_FORMAT="json",
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    log_path = tmp_path / "server.log"
    log = log_path.open("w")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_serving(process, f"http://127.0.0.1:{port}/health/live", log_path)
        token = Path(base_settings["auth_token_file"]).read_text().strip()
        answer = requests.post(
            f"http://127.0.0.1:{port}/chat",
            json={"message": "hi"},
            headers={"Authorization": f"Bearer {token}", "traceparent": f"00-{TRACE_ID}-53995c3f42cd8ad8-01"},
            timeout=30,
        )
        assert answer.status_code == 502  # provider_unavailable
        wait_until(lambda: any(span["trace_id"] == TRACE_ID for span in list(receiver.spans)), "no span exported")
    finally:
        stop_process(process, log)
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]  # each line is JSON
    failed = [line for line in lines if "provider call failed" in line["message"]]
    assert failed and all(line["trace_id"] == TRACE_ID for line in failed)
    exported = {str(span["name"]) for span in receiver.spans if span["trace_id"] == TRACE_ID}
    assert "chat m" in exported
    assert any(line["logger"].startswith("uvicorn") for line in lines)  # the server's own lines too
