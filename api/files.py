"""`GET /files/<path>`: uploaded and generated images, served only to their owner.

They are private: `Cache-Control: private` keeps them out of shared caches (a proxy would
otherwise hand one user's image to the next who asks for the URL); the browser may still
keep its own copy for an hour (the files never change under a name)."""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, send_file
from flask.typing import ResponseReturnValue

from api.auth import current_user, require_user
from api.declare import IMAGE, NOT_FOUND, Reply, operation
from api.errors import not_found
from api.services import services

bp = Blueprint("files", __name__)
bp.before_request(require_user)

SERVED_FOLDERS = ("uploads", "generated")
BROWSER_CACHE_S = 3600


@bp.get("/files/<folder>/<int:owner>/<name>")
@operation(
    "An uploaded or generated image (its owner only)",
    replies={200: Reply("the image", media=(IMAGE,)), 404: NOT_FOUND},
)
def serve(folder: str, owner: int, name: str) -> ResponseReturnValue:
    if folder not in SERVED_FOLDERS or owner != current_user().id:
        raise not_found("file")
    root = (Path(services().settings.data_dir) / folder / str(owner)).resolve()
    target = (root / name).resolve()
    if target.parent != root or not target.is_file():
        raise not_found("file")
    response = send_file(target, max_age=BROWSER_CACHE_S)
    response.cache_control.public = False
    response.cache_control.private = True
    return response
