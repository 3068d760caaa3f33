"""The model-down banner in a real browser (issue 26 item 7, `static/js/status.js`).

The server's model is a fake on a port of its own: stopping it is a dead model (its kept-alive
connections are closed unanswered too), and a new fake on the same port is the model back.
`PROVIDER_RECHECK_S=0` lets every page recheck probe at once (its bound is tested in
tests/api/test_status_api.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from testing.fake_llm import FakeLLMServer
from tests.ui_support import log_in, require_chromium, serve, shot

pytestmark = [pytest.mark.browser]


class Model:
    """A fake model that can be stopped and started again on the same port."""

    def __init__(self) -> None:
        self.fake = FakeLLMServer().__enter__()
        self.port = self.fake.port

    def stop(self) -> None:
        self.fake.__exit__(None, None, None)

    def start(self) -> None:
        self.fake = FakeLLMServer(port=self.port).__enter__()


@pytest.fixture(scope="module")
def model() -> Iterator[Model]:
    found = Model()
    yield found
    found.stop()


@pytest.fixture(scope="module")
def banner_server(model: Model, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_chromium()
    with serve(model.fake, tmp_path_factory.mktemp("ui-banner-server"), PROVIDER_RECHECK_S="0") as running:
        yield running


def focus_again(page: Any) -> None:
    """What the browser does when the user comes back to the window."""
    page.evaluate("window.dispatchEvent(new Event('focus'))")


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}])
def test_banner_before_sending_and_gone_when_the_model_is_back(
    page: Any, banner_server: dict[str, str], model: Model, viewport: dict[str, int]
) -> None:
    log_in(page, banner_server)
    page.set_viewport_size(viewport)  # after log_in: on a phone the "New chat" button is in the drawer
    banner = page.locator("#model-banner")
    expect(banner).to_be_hidden()
    model.stop()
    try:
        focus_again(page)
        expect(banner).to_be_visible()
        assert banner.get_attribute("role") == "status"
        text = banner.inner_text()
        assert "not answering" in text and "fake (openai)" in text and "kept" in text
        expect(page.locator("#composer-input")).to_be_editable()  # not blocking: the user can still write
        shot(page, f"care-model-down-{viewport['width']}")
    finally:
        model.start()
    focus_again(page)
    expect(banner).to_be_hidden()


def test_a_failed_turn_rechecks_at_once(page: Any, banner_server: dict[str, str], model: Model) -> None:
    log_in(page, banner_server)
    banner = page.locator("#model-banner")
    expect(banner).to_be_hidden()
    model.stop()
    try:
        page.fill("#composer-input", "hello?")
        page.press("#composer-input", "Enter")  # no focus event: the provider_unavailable error asks
        expect(page.locator(".turn-error")).to_be_visible(timeout=20_000)
        expect(banner).to_be_visible()
    finally:
        model.start()
    page.locator("#model-banner .link-button").click()  # "Check again", by keyboard-reachable button
    expect(banner).to_be_hidden()


def test_the_banner_shows_on_load_when_the_model_is_already_down(
    page: Any, banner_server: dict[str, str], model: Model
) -> None:
    model.stop()
    try:
        log_in(page, banner_server)
        expect(page.locator("#model-banner")).to_be_visible()
    finally:
        model.start()
