"""`GET /`: the chat web UI, a static page with a strict Content-Security-Policy.

The page itself needs no login (it shows the login form); every API call it makes is
authenticated like any other client's. The CSP allows only this origin's scripts, styles
and connections, so even markup that slipped past the sanitiser could not run script:
no inline scripts, no inline event handlers, no `javascript:` URLs, no CDN.

The page is ES modules. As written (static/js), the browser would find them level by level
(app.js, then what it imports, then what those import...), a round trip per level before
anything shows, and some fifty requests in all. So `scripts/setup.sh` bundles them with esbuild
(`web/bundle.mjs`: static/dist/app.js, minified), and the page loads that bundle whenever its
stamp matches the sources (`bundle_stamp`). When it does not (a module was edited since the last
set-up, or npm is missing), the page loads the modules as written and names every module of
app.js's static import graph up front (`<link rel="modulepreload">`, read from the files on each
request), so the browser fetches them all at once. Figures: bench/README.md (ui.py).
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

from flask import Blueprint, Response, current_app, request
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
ENTRY_MODULE = "/static/js/app.js"
ENTRY_TAG = '<script type="module"'
# `import x from "/static/..."`, `export {...} from "..."` and `import "..."`; not `import(...)`,
# which loads on demand (a module only some screens need stays out of the first render).
STATIC_IMPORT = re.compile(r"""(?:\bfrom|\bimport)\s*["'](/static/[^"'\s]+\.m?js)["']""")


def module_graph(static: Path, entry: str = ENTRY_MODULE) -> list[str]:
    """The URLs of every module `entry` imports statically, directly or not, entry excluded."""
    found: list[str] = []
    queue = [entry]
    while queue:
        url = queue.pop(0)
        if url in found:
            continue
        found.append(url)
        try:
            source = (static / url.removeprefix("/static/")).read_text(encoding="utf-8")
        except OSError:
            continue  # the browser reports a missing module itself
        queue += STATIC_IMPORT.findall(source)
    return found[1:]


BUNDLE_ENTRY = "/static/dist/app.js"
BUNDLE_STAMP = "dist/stamp"
BUNDLED_FOLDERS = ("js", "vendor")  # what web/bundle.mjs's stamp covers


def bundle_sources(static: Path) -> tuple[tuple[str, int, int], ...]:
    """The bundled folders' .js and .mjs files: (relative path, size, mtime), sorted by path."""
    found = []
    for folder in BUNDLED_FOLDERS:
        for path in (static / folder).rglob("*"):
            if path.suffix in (".js", ".mjs") and path.is_file():
                info = path.stat()
                found.append((path.relative_to(static).as_posix(), info.st_size, info.st_mtime_ns))
    return tuple(sorted(found))


@lru_cache(maxsize=8)
def _stamp_of(static: Path, sources: tuple[tuple[str, int, int], ...]) -> str:
    """web/bundle.mjs's stamp, computed again only when a file's size or time changed."""
    digest = hashlib.sha256()
    for relative, _size, _mtime in sources:
        digest.update(f"static/{relative}\n".encode())
        digest.update((static / relative).read_bytes())
    return digest.hexdigest()


def bundle_stamp(static: Path) -> str:
    """The stamp of the sources the bundle is built from (web/bundle.mjs computes the same)."""
    return _stamp_of(static, bundle_sources(static))


def bundle_is_fresh(static: Path) -> bool:
    try:
        built = (static / BUNDLE_STAMP).read_text(encoding="utf-8").strip()
    except OSError:
        return False
    return (static / BUNDLE_ENTRY.removeprefix("/static/")).is_file() and built == bundle_stamp(static)


def page_html(static: Path) -> str:
    html = (static / "index.html").read_text(encoding="utf-8")
    if bundle_is_fresh(static):
        return html.replace(f'src="{ENTRY_MODULE}"', f'src="{BUNDLE_ENTRY}"', 1)
    links = "".join(f'<link rel="modulepreload" href="{url}">\n  ' for url in module_graph(static))
    return html.replace(ENTRY_TAG, links + ENTRY_TAG, 1)


@bp.get("/")
@operation("The chat web UI", auth=False, replies={200: Reply("the page", media=(HTML,))})
def index() -> ResponseReturnValue:
    response = Response(page_html(Path(current_app.static_folder or "static")), mimetype="text/html")
    response.headers.update(PAGE_HEADERS)
    response.add_etag()
    return response.make_conditional(request)
