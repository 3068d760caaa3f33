"""`GET /`: the chat web UI, a static page with a strict Content-Security-Policy.

The page itself needs no login (it shows the login form); every API call it makes is
authenticated like any other client's. The CSP allows only this origin's scripts, styles
and connections, so even markup that slipped past the sanitiser could not run script:
no inline scripts, no inline event handlers, no `javascript:` URLs, no CDN.
"""

from __future__ import annotations

from flask import Blueprint, current_app, send_from_directory
from flask.typing import ResponseReturnValue

from api.declare import HTML, Reply, operation

bp = Blueprint("ui", __name__)

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data: blob:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@bp.get("/")
@operation("The chat web UI", auth=False, replies={200: Reply("the page", media=(HTML,))})
def index() -> ResponseReturnValue:
    response = send_from_directory(current_app.static_folder or "static", "index.html", max_age=0)
    response.headers.update(PAGE_HEADERS)
    return response
