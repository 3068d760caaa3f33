"""While the judge's images are built in the background (`make run`), the Code and Problems
panels say "The code runner is being prepared…", and Run says so too (issue 26 item 9).

The build is a real process named in `DATA_DIR/judge-images/building`, as
`scripts/judge_images.sh` leaves it; the engine is faked at its boundary: a `DOCKER_HOST`
socket where no engine answers. Killing the build's process ends "preparing"."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from judge.preparing import marker_path
from testing.fake_llm import FakeLLMServer
from tests.ui_support import log_in, require_chromium, serve, shot

pytestmark = [pytest.mark.browser]


@pytest.fixture(scope="module")
def build() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


@pytest.fixture(scope="module")
def preparing_server(
    llm: FakeLLMServer, build: subprocess.Popen[bytes], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    require_chromium()
    folder = tmp_path_factory.mktemp("ui-preparing-server")
    marker = marker_path(folder / "data")
    marker.parent.mkdir(parents=True)
    marker.write_text(f"{build.pid}\n")
    settings = {"JUDGE_ENABLED": "1", "DOCKER_HOST": f"unix://{folder}/no-engine.sock", "HEALTH_CACHE_S": "0"}
    with serve(llm, folder, **settings) as running:
        yield running


def test_code_and_problems_panels_say_the_runner_is_being_prepared(
    page: Any, preparing_server: dict[str, str], build: subprocess.Popen[bytes]
) -> None:
    log_in(page, preparing_server)
    page.click("#code-toggle")
    notice = page.locator("#code-panel-runner-state")
    expect(notice).to_contain_text("The code runner is being prepared…")
    assert notice.get_attribute("role") == "status"
    page.fill("#run-code", "print(1)")
    page.click("#run-button")
    expect(page.locator("#run-result")).to_contain_text("The code runner is being prepared")
    shot(page, "care-runner-preparing")
    page.click("#problems-toggle")
    expect(page.locator("#problems-panel-runner-state")).to_contain_text("being prepared")
    expect(page.locator("#model-banner")).to_be_hidden()  # the chat itself works meanwhile

    build.kill()  # the build ends (here: without images): no longer "preparing"
    build.wait()
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    expect(page.locator("#problems-panel-runner-state")).to_have_count(0)
    expect(page.locator("#code-panel-runner-state")).to_have_count(0)
