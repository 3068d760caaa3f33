"""`GET /`: the page loads the bundle, or names its whole module graph up front (issue 26, Speed).

`scripts/setup.sh` bundles the modules (`web/bundle.mjs`, esbuild) into static/dist/app.js and
stamps it with what it was built from; the page loads it while the stamp matches the modules.
Otherwise (a module edited since, no bundle at all) it loads the modules as written and lists
them all as `<link rel="modulepreload">`, read from the files, so the browser need not discover
them level by level (app.js, then its imports, then theirs), a round trip per level.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from api.ui import BUNDLE_ENTRY, PAGE_HEADERS, bundle_is_fresh, bundle_stamp, page_html

ROOT = Path(__file__).resolve().parent.parent.parent
STATIC = ROOT / "static"
MODULES_TAG = '<script type="module" src="/static/js/app.js">'
BUNDLE_TAG = f'<script type="module" src="{BUNDLE_ENTRY}">'


def preloads(html: str) -> list[str]:
    return re.findall(r'<link rel="modulepreload" href="([^"]+)">', html)


@pytest.fixture
def static(tmp_path: Path) -> Path:
    """The page and its modules, without a bundle."""
    copy = tmp_path / "static"
    copy.mkdir()
    shutil.copy(STATIC / "index.html", copy / "index.html")
    for folder in ("js", "vendor"):
        shutil.copytree(STATIC / folder, copy / folder)
    return copy


def bundle(static: Path) -> None:
    """A stand-in bundle with the stamp of the modules as they are now."""
    (static / "dist").mkdir(exist_ok=True)
    (static / "dist" / "app.js").write_text("export {};\n")
    (static / "dist" / "stamp").write_text(bundle_stamp(static) + "\n")


def test_without_a_bundle_the_page_preloads_every_module_of_the_graph_at_every_depth(static: Path) -> None:
    html = page_html(static)
    listed = preloads(html)
    # app.js imports login.js, which imports turns.js, which imports live.js, which imports
    # render.js, which imports the vendored Markdown parser: each level is listed
    for url in ("/static/js/login.js", "/static/js/turns.js", "/static/js/live.js", "/static/js/render.js"):
        assert url in listed
    assert "/static/vendor/marked.esm.js" in listed and "/static/vendor/purify.es.js" in listed
    assert "/static/js/app.js" not in listed  # loaded by its own script tag
    assert len(listed) == len(set(listed))
    for url in listed:
        assert (static / url.removeprefix("/static/")).is_file(), url
    assert html.index('rel="modulepreload"') < html.index(MODULES_TAG)


def test_every_module_file_that_app_js_reaches_is_listed(static: Path) -> None:
    """Walked here independently: every static import in every listed file is listed too."""
    listed = set(preloads(page_html(static))) | {"/static/js/app.js"}
    for url in listed:
        source = (static / url.removeprefix("/static/")).read_text()
        for imported in re.findall(r'^\s*(?:import|export)\b[^;]*?from\s*"(/static/[^"]+)"', source, re.M | re.S):
            assert imported in listed, f"{url} imports {imported}, which the page does not preload"


def test_a_fresh_bundle_is_what_the_page_loads(static: Path) -> None:
    bundle(static)
    html = page_html(static)
    assert BUNDLE_TAG in html and MODULES_TAG not in html
    assert preloads(html) == []


def test_a_module_edited_after_bundling_is_served_as_written(static: Path) -> None:
    bundle(static)
    with (static / "js" / "render.js").open("a") as module:
        module.write("\n// edited after the bundle was built\n")
    assert not bundle_is_fresh(static)
    html = page_html(static)
    assert MODULES_TAG in html and BUNDLE_TAG not in html
    assert "/static/js/render.js" in preloads(html)


def test_a_vendored_library_changed_after_bundling_is_noticed_too(static: Path) -> None:
    bundle(static)
    (static / "vendor" / "marked.esm.js").write_text("export const Marked = class {};\n")
    assert not bundle_is_fresh(static)


def test_the_bundlers_stamp_is_the_servers() -> None:
    """web/bundle.mjs and api/ui.py compute the same stamp over the same files."""
    node = shutil.which("node")
    if node is None or not (ROOT / "web" / "node_modules" / "esbuild").is_dir():
        if os.environ.get("CI") or os.environ.get("BROWSER_REQUIRED") == "1":
            pytest.fail("node and web/node_modules (scripts/setup.sh) are needed to build the web UI's bundle")
        pytest.skip("node or web/node_modules missing (scripts/setup.sh installs them)")
    run = subprocess.run([node, "web/bundle.mjs", "--stamp"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == bundle_stamp(STATIC)


@pytest.mark.skipif(
    not (os.environ.get("CI") or os.environ.get("BROWSER_REQUIRED") == "1"),
    reason="a working tree may hold modules edited since its last set-up",
)
def test_after_set_up_the_page_serves_the_bundle(client: FlaskClient) -> None:
    """What CI's set-up built is fresh, and `GET /` loads it (the browser tests then run on it)."""
    assert bundle_is_fresh(STATIC)
    assert BUNDLE_TAG in client.get("/").get_data(as_text=True)


def test_the_page_revalidates_with_its_etag_and_keeps_its_headers(client: FlaskClient) -> None:
    first = client.get("/")
    etag = first.headers["ETag"]
    for name, value in PAGE_HEADERS.items():
        assert first.headers[name] == value
    again = client.get("/", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.get_data() == b""
