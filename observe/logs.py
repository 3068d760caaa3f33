"""Log lines as JSON objects (`LOG_FORMAT=json`), each with the trace and span it was written in.

One object per line: `time` (UTC, ISO-8601 with ms), `level`, `logger`, `message`, and
`trace_id` / `span_id` (hex, as OTLP backends show them) when the line was written inside a
span; `exc_info` as `exception` text. A log shipper can then join a line to its trace.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

from observe.telemetry import current_ids


class JsonLines(logging.Formatter):
    """A `logging.Formatter` writing one JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        ids = current_ids()
        if ids is not None:
            line["trace_id"], line["span_id"] = ids
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(log_format: str, level: int = logging.INFO) -> None:
    """The root logger's one handler on stderr: plain text lines or JSON lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
