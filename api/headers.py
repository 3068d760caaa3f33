"""Headers every answer carries, whatever produced it (a view, an error, a 429, a stream's
placeholder whose headers the event loop reuses).

`X-Content-Type-Options: nosniff`: a browser must take each answer for the type it is
declared as, so an uploaded file or a tool's text can never be sniffed into HTML or script.
"""

from __future__ import annotations

from flask import Flask, Response


def init_app(app: Flask) -> None:
    app.after_request(security_headers)


def security_headers(response: Response) -> Response:
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response
