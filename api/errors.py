"""One error type for every HTTP failure, rendered as `{"error": {"code", "message", "details"?}}`."""

from __future__ import annotations

from typing import Any

import redis
from flask import Flask, jsonify
from flask.typing import ResponseReturnValue
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

from foundation.fair_share import RETRY_AFTER_S, Busy
from storage.errors import StorageError, storage_fault


class ApiError(Exception):
    """An HTTP error answer with a stable machine-readable code."""

    def __init__(
        self,
        status_code: int,
        code: str,
        message: str,
        details: Any = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.details = details
        self.extra = extra or {}
        self.headers = headers or {}

    def to_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            error["details"] = self.details
        return {"error": error, **self.extra}


def not_found(what: str) -> ApiError:
    return ApiError(404, "not_found", f"{what} not found")


def busy(message: str, retry_after_s: int = RETRY_AFTER_S) -> ApiError:
    """503 `busy` with `Retry-After`: a shared pool (sandbox workers, the judge) had no place for
    this user's job in time (SPEC 12: never a 500)."""
    return ApiError(503, "busy", message, headers={"Retry-After": str(retry_after_s)})


def validation_error(error: ValidationError, code: str = "invalid_request") -> ApiError:
    details = [
        {"field": ".".join(str(part) for part in item["loc"]), "message": item["msg"]} for item in error.errors()
    ]
    summary = "; ".join(f"{d['field'] or 'body'}: {d['message']}" for d in details)
    return ApiError(400, code, f"invalid request: {summary}", details)


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def dependency_refusal(error: BaseException) -> ApiError | None:
    """The 503 of a dependency that failed (the database refused, Redis did not answer), or None
    for any other error: the same answer over HTTP and over `/mcp` (`mcp_server/`)."""
    if storage_fault(error):
        return ApiError(
            503, "storage_unavailable", "the database refused a write (it is locked, full or read-only); retry later"
        )
    if isinstance(error, redis.RedisError):
        return ApiError(503, "live_state_unavailable", "the shared live state (Redis) does not answer; retry later")
    return None


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def handle_api_error(error: ApiError) -> ResponseReturnValue:
        return jsonify(error.to_dict()), error.status_code, error.headers

    @app.errorhandler(Busy)
    def handle_busy(error: Busy) -> ResponseReturnValue:
        """A shared pool refused a place in time (the judge's run admission for `/run`, `/submit`)."""
        return handle_api_error(busy(error.message, error.retry_after_s))

    @app.errorhandler(HTTPException)
    def handle_http_exception(error: HTTPException) -> ResponseReturnValue:
        status = error.code or 500
        code = _HTTP_CODES.get(status, "http_error")
        headers = [(name, value) for name, value in error.get_headers() if name.lower() != "content-type"]
        return jsonify({"error": {"code": code, "message": error.description or code}}), status, headers

    @app.errorhandler(StorageError)
    def handle_storage_fault(error: StorageError) -> ResponseReturnValue:
        """A write refused by the database (read-only, full, locked) outside a turn: 503, as in a turn."""
        refusal = dependency_refusal(error)
        if refusal is None:
            return handle_unexpected(error)
        app.logger.warning("database refused: %s (%s)", error, error.code)
        return jsonify(refusal.to_dict()), refusal.status_code

    @app.errorhandler(redis.RedisError)
    def handle_live_state_fault(error: redis.RedisError) -> ResponseReturnValue:
        """REDIS_URL's Redis (events, active turns) did not answer: 503, the request may be retried."""
        app.logger.warning("Redis did not answer: %s", error)
        refusal = dependency_refusal(error)
        assert refusal is not None
        return jsonify(refusal.to_dict()), refusal.status_code

    @app.errorhandler(Exception)
    def handle_unexpected(error: Exception) -> ResponseReturnValue:
        app.logger.exception("unhandled error")
        return jsonify({"error": {"code": "internal_error", "message": "internal server error"}}), 500
