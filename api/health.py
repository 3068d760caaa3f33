"""`GET /health`: the real state of the database, the provider and the judge."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify

from api.database import get_db

bp = Blueprint("health", __name__)


@bp.get("/health")
def health():  # type: ignore[no-untyped-def]
    services = current_app.extensions["turn_services"]
    try:
        get_db().execute("SELECT 1").fetchone()
        database = {"ok": True, "path": services.database.path}
    except Exception as error:  # the health answer must describe, not crash
        database = {"ok": False, "error": str(error)}
    primary = services.chat.primary
    provider = {"name": primary.name, "model": primary.model, "fallbacks": len(services.chat.providers) - 1}
    judge = current_app.extensions.get("judge_status", {"available": False, "reason": "the Docker judge is not part of this build yet"})
    status = "ok" if database["ok"] else "degraded"
    return jsonify({"status": status, "database": database, "provider": provider, "judge": judge}), (
        200 if database["ok"] else 503
    )
