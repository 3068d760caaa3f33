"""`GET /`: the page names its whole module graph up front (issue 26, Speed).

Without a build step the browser would discover the modules level by level (app.js, then its
imports, then theirs), one round trip per level before the chat shows. The page lists them
all as `<link rel="modulepreload">`, read from the files, so a module another change adds is
preloaded without touching index.html.
"""

from __future__ import annotations

import re
from pathlib import Path

from flask.testing import FlaskClient

from api.ui import PAGE_HEADERS

STATIC = Path(__file__).resolve().parent.parent.parent / "static"


def preloads(html: str) -> list[str]:
    return re.findall(r'<link rel="modulepreload" href="([^"]+)">', html)


def test_the_page_preloads_every_module_of_the_graph_at_every_depth(client: FlaskClient) -> None:
    response = client.get("/")
    assert response.status_code == 200
    listed = preloads(response.get_data(as_text=True))
    # app.js imports login.js, which imports turns.js, which imports live.js, which imports
    # render.js, which imports the vendored Markdown parser: each level is listed
    for url in ("/static/js/login.js", "/static/js/turns.js", "/static/js/live.js", "/static/js/render.js"):
        assert url in listed
    assert "/static/vendor/marked.esm.js" in listed and "/static/vendor/purify.es.js" in listed
    assert "/static/js/app.js" not in listed  # loaded by its own script tag
    assert len(listed) == len(set(listed))
    for url in listed:
        assert (STATIC / url.removeprefix("/static/")).is_file(), url
    html = response.get_data(as_text=True)
    assert html.index('rel="modulepreload"') < html.index('<script type="module" src="/static/js/app.js">')


def test_every_module_file_that_app_js_reaches_is_listed(client: FlaskClient) -> None:
    """Walked here independently: every static import in every listed file is listed too."""
    listed = set(preloads(client.get("/").get_data(as_text=True))) | {"/static/js/app.js"}
    for url in listed:
        source = (STATIC / url.removeprefix("/static/")).read_text()
        for imported in re.findall(r'^\s*(?:import|export)\b[^;]*?from\s*"(/static/[^"]+)"', source, re.M | re.S):
            assert imported in listed, f"{url} imports {imported}, which the page does not preload"


def test_the_page_revalidates_with_its_etag_and_keeps_its_headers(client: FlaskClient) -> None:
    first = client.get("/")
    etag = first.headers["ETag"]
    for name, value in PAGE_HEADERS.items():
        assert first.headers[name] == value
    again = client.get("/", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.get_data() == b""
