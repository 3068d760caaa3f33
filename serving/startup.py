"""What `python app.py` tells a newcomer before it serves: where to go, where the admin token
is, whether the model answers (and how to fix it when not), and whether the judge can run.

The report is built from what the app already holds (`api/services.py`): the provider line
reuses `/health`'s probe (`providers.ProviderProbe`, a short timeout, then cached), the judge line the
state `create_app` found. The admin token itself is never logged, only the file it is in.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from flask import Flask
from pydantic import BaseModel, ConfigDict

from api.services import services_of
from config.settings import Settings
from judge.preparing import build_running

log = logging.getLogger("startup")

#: Hosts that mean "every interface": a browser opens them on the loopback address.
ANY_HOST = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}


class ReportLine(BaseModel):
    """One log line of the start-up report; `warning` lines say what needs fixing."""

    model_config = ConfigDict(frozen=True)
    text: str
    warning: bool = False


def open_url(host: str, port: int) -> str:
    """The address to open in a browser (IPv6 in brackets, a wildcard host as loopback)."""
    host = ANY_HOST.get(host, host)
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def token_line(token_file: str) -> ReportLine:
    path = Path(token_file).resolve()
    if path.is_file():
        return ReportLine(
            text=f"admin token: in {path} (log in with it; `python app.py reset-admin-token` writes a new one)"
        )
    return ReportLine(
        text=f"admin token: {path} is missing; `python app.py reset-admin-token` writes a new one", warning=True
    )


def provider_lines(report: dict[str, Any]) -> list[ReportLine]:
    """One line per provider of the chain (the primary first), from `ProviderProbe.report()`."""
    lines = []
    for index, entry in enumerate(report["chain"]):
        role = "provider" if index == 0 else f"fallback {index}"
        head = f"{role}: {entry['name']}, model {entry['model']}"
        if entry["ok"]:
            lines.append(ReportLine(text=f"{head}: answers ({entry['detail']})"))
        else:
            lines.append(
                ReportLine(text=f"{head}: NOT reachable ({entry['detail']}); to fix it, {entry['hint']}", warning=True)
            )
    return lines


def shown_url(url: str) -> str:
    """A base URL without what could be a secret in it (user, password, query)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def model_down_line(report: dict[str, Any], base_url: str) -> list[ReportLine]:
    """When no provider of the chain answers, one plain line before the details: where the model
    was looked for, that the server serves anyway, and the way to try it without a model."""
    if report["ok"]:
        return []
    return [
        ReportLine(
            text=f"the model at {shown_url(base_url)} does not answer ({report['detail']}): the server starts, "
            "but chats fail until it "
            "does. To try the product without a model, stop this and run `make demo` (a scripted model).",
            warning=True,
        )
    ]


def judge_line(status: dict[str, Any], preparing: bool = False) -> ReportLine:
    """The judge's state as `create_app` found it (`Services.judge_status`); `preparing` while
    `scripts/judge_images.sh` builds the images (`make run` starts it in the background)."""
    if status.get("available"):
        return ReportLine(text="judge: available (code runs in Docker containers)")
    if preparing:
        return ReportLine(
            text="judge: being prepared (its images are being built in the background; the first build takes "
            "minutes, log in DATA_DIR/judge-images/build.log); the chat works meanwhile, /run answers "
            "`judge_preparing` until it is ready"
        )
    reason = str(status.get("reason") or "unknown reason")
    if "JUDGE_ENABLED" in reason:
        return ReportLine(text=f"judge: off ({reason}); /run_code and task checks answer that it is unavailable")
    return ReportLine(
        text=f"judge: unavailable ({reason}); chat works, /run_code and task checks do not "
        "(`make judge-images` sets up Docker and the judge's images)",
        warning=True,
    )


def database_line(settings: Settings) -> ReportLine:
    """Which database this process uses (`DATABASE_URL`; a PostgreSQL password is never shown)."""
    target = settings.database_target()
    if target.kind == "postgresql":
        return ReportLine(
            text=f"database: PostgreSQL {target.redacted()} (at most {settings.database_pool_size} connections)"
        )
    return ReportLine(text=f"database: SQLite file {Path(target.location).resolve()}")


def startup_report(app: Flask, settings: Settings) -> list[ReportLine]:
    """The report's lines, in the order a newcomer needs them."""
    probe = services_of(app).provider_probe
    report = probe.report()
    return [
        ReportLine(text=f"open {open_url(settings.host, settings.port)} in a browser"),
        token_line(settings.auth_token_file),
        *model_down_line(report, probe.chain.providers[0].base_url),
        *provider_lines(report),
        judge_line(services_of(app).judge_status, build_running(settings.data_dir)),
        database_line(settings),
    ]


def log_startup_report(app: Flask, settings: Settings) -> None:
    for line in startup_report(app, settings):
        log.log(logging.WARNING if line.warning else logging.INFO, "%s", line.text)
