"""The page frees what it makes and says what fails (issue 13 item 6), in a real browser.

Image previews are shown from object URLs: each one is revoked (a `fetch` of it then fails)
when its image is removed from the composer or its message is sent. An error the page used to
swallow (`.catch(() => null)` on `POST /api/logout`, an unhandled rejection from "Load older
messages") is now said in the chat, and the page stays signed in while the server's session
is still open. The failures are real answers from the network layer (Playwright's `route`),
not changes to the page's code.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer, tiny_png
from tests.ui_support import click_topbar, send, shot

pytestmark = [pytest.mark.browser]


@pytest.fixture
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    """The page's CSP allows `blob:` images but not `fetch(blob:)` (connect-src 'self'): this
    module's tests fetch the preview URLs to see which are revoked, so the CSP is bypassed here
    (test_ui_browser.py checks the CSP itself)."""
    return {**browser_context_args, "bypass_csp": True}


# Records the src of every blob: image the page puts in the document (the composer's previews
# and the pending message's images), before anything can revoke it.
RECORD_BLOB_IMAGES = """() => {
  window.__blobImages = [];
  const record = (node) => {
    if (!(node instanceof Element)) return;
    const images = node.matches('img') ? [node] : [...node.querySelectorAll('img')];
    for (const image of images) {
      const src = image.getAttribute('src') || '';
      if (src.startsWith('blob:')) window.__blobImages.push({ src, pending: Boolean(image.closest('.message.pending')) });
    }
  };
  new MutationObserver((changes) => changes.forEach((change) => change.addedNodes.forEach(record)))
    .observe(document.body, { childList: true, subtree: true });
}"""

FETCHABLE = "(urls) => Promise.all(urls.map((url) => fetch(url).then(() => true, () => false)))"


def png(name: str, size: int) -> dict[str, Any]:
    return {"name": name, "mimeType": "image/png", "buffer": tiny_png(size, size)}


def preview_urls(ui: Any) -> list[str]:
    return ui.eval_on_selector_all("#attachments .attachment img", "(images) => images.map((image) => image.src)")


def test_image_previews_are_revoked_when_removed_and_when_sent(ui: Any, llm: FakeLLMServer) -> None:
    ui.evaluate(RECORD_BLOB_IMAGES)
    ui.set_input_files("#image-input", [png("one.png", 8), png("two.png", 16)])
    ui.wait_for_function("() => document.querySelectorAll('#attachments .attachment img').length === 2")
    first, second = preview_urls(ui)
    assert first.startswith("blob:") and second.startswith("blob:") and first != second
    assert ui.evaluate(FETCHABLE, [first, second]) == [True, True]

    ui.click("#attachments .remove-attachment[aria-label='Remove image 1']")
    ui.wait_for_function("() => document.querySelectorAll('#attachments .attachment img').length === 1")
    assert preview_urls(ui) == [second]  # the kept image keeps its URL: not made again
    assert ui.evaluate(FETCHABLE, [first, second]) == [False, True]
    assert ui.inner_text("#attachments-status") == "Image 1 removed."  # said once, not every preview again

    llm.reset(delay_s=0.3)
    llm.queue("A square.")
    ui.fill("#composer-input", "what is this?")
    ui.press("#composer-input", "Enter")
    ui.locator(".role-assistant:has-text('A square.')").wait_for()
    ui.locator(".role-user .image-strip img[src^='/files/uploads/']").wait_for()

    seen = ui.evaluate("window.__blobImages")
    urls = sorted({image["src"] for image in seen})
    assert {first, second} <= set(urls)
    assert any(image["pending"] for image in seen), seen  # the message's own preview while it was sent
    assert len(urls) == 3, seen  # two composer previews and one for the pending message
    assert ui.evaluate(FETCHABLE, urls) == [False, False, False]
    assert ui.locator("#attachments .attachment").count() == 0
    assert ui.inner_text("#attachments-status") == ""


def test_a_failed_sign_out_is_said_and_the_page_stays_signed_in(ui: Any, server: dict[str, str]) -> None:
    failure = {"error": {"code": "storage_unavailable", "message": "the session store did not answer"}}

    def refuse(route: Any) -> None:
        route.fulfill(status=503, content_type="application/json", body=json.dumps(failure))

    ui.route("**/api/logout", refuse)
    click_topbar(ui, "#logout-button")
    notice = ui.locator("#message-list .notice-error:has-text('Could not sign out')")
    notice.wait_for()
    assert "the session store did not answer" in notice.inner_text()
    assert notice.get_attribute("role") is None  # the message list (role=log) announces it, once
    assert ui.is_visible("#app-view") and not ui.is_visible("#login-view")
    assert ui.evaluate("fetch('/api/me').then((response) => response.status)") == 200
    shot(ui, "70-sign-out-failed")

    ui.unroute("**/api/logout")
    click_topbar(ui, "#logout-button")
    ui.wait_for_selector("#login-view:not([hidden])")
    assert ui.evaluate("fetch('/api/me').then((response) => response.status)") == 401


def test_a_failed_load_of_older_messages_is_said(ui: Any, llm: FakeLLMServer) -> None:
    llm.queue("First answer.")
    send(ui, "first question")
    ui.locator(".role-assistant:has-text('First answer.')").wait_for()
    failure = {"error": {"code": "storage_unavailable", "message": "the database is locked"}}

    def page_of_messages(route: Any) -> None:
        if "before=" in route.request.url:  # the older page fails
            route.fulfill(status=503, content_type="application/json", body=json.dumps(failure))
            return
        response = route.fetch()  # the newest page, as the server sent it, said to have more
        route.fulfill(response=response, json={**response.json(), "has_more": True})

    ui.route(re.compile(r"/sessions/[^/]+/messages\?"), page_of_messages)
    ui.reload()
    ui.wait_for_selector("#app-view[aria-busy='false']")
    ui.locator(".role-assistant:has-text('First answer.')").wait_for()
    ui.click("#load-older")
    notice = ui.locator("#message-list .notice-error:has-text('Could not load older messages')")
    notice.wait_for()
    assert "the database is locked" in notice.inner_text()
    assert ui.locator("#message-list .message").count() == 2  # what was shown stays
    assert ui.is_visible("#load-older")  # the user can try again
