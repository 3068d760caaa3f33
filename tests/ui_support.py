"""Browser-test support: the real server, the fake model, chromium, and page helpers.

Loaded as a pytest plugin (`pytest_plugins` in tests/conftest.py), so each browser test module
gets its own server (module-scoped fixtures) without importing fixtures by name.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from config.settings import Settings
from judge.sandbox import PID_LABEL
from testing.fake_llm import FakeLLMServer
from testing.ports import free_port as free_port  # the one allocator, re-exported
from tests.process_support import stop_process, wait_until_serving

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 10_000
SETTING_NAMES = {name.upper() for name in Settings.model_fields}
XSS_MARKER = "window.__xss"


def require_chromium() -> None:
    if CHROMIUM.is_file():
        return
    message = f"browser tests need Debian's chromium at {CHROMIUM} (apt-get install chromium; scripts/test.sh does it as root)"
    if os.environ.get("CI") or os.environ.get("BROWSER_REQUIRED") == "1":
        pytest.fail(message)
    pytest.skip(message)


def require_axe(message: str) -> None:
    """axe-core missing: a failure on CI (or BROWSER_REQUIRED=1), where set-up installs it; else a skip."""
    if os.environ.get("CI") or os.environ.get("BROWSER_REQUIRED") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture(scope="module")
def server(llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The real server as a user runs it; yields its base URL and the admin token."""
    require_chromium()
    image_model = {"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": llm.openai_base_url, "IMAGE_MODEL": "fake-image"}
    with serve(llm, tmp_path_factory.mktemp("ui-server"), **image_model) as running:
        yield running


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict[str, Any]) -> dict[str, Any]:
    """pytest-playwright launches Debian's chromium (Playwright's own downloads are never used)."""
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "args": CHROMIUM_ARGS}


@pytest.fixture
def ui(server: dict[str, str], page: Any, llm: FakeLLMServer) -> Iterator[Any]:
    """A logged-in page; fails the test if any dialog opened or any injected script ran."""
    llm.reset()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(server["base"] + "/")
    page.click("#login-use-token")  # the form asks for a name and password first
    page.fill("#login-token", server["token"])
    page.press("#login-token", "Enter")
    page.wait_for_selector("#app-view[aria-busy='false']")
    page.click("#new-session")
    page.wait_for_selector("#app-view[aria-busy='false']")
    assert page.locator("#message-list > *").count() == 0
    yield page
    assert dialogs == [], f"a dialog opened: {dialogs}"
    assert page.evaluate(XSS_MARKER) is None, "injected script ran"


def shot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def seen_before_reply(page: Any, selector: str) -> None:
    """`selector` shows up while the turn is still running (polled from here: a step may
    last only as long as the fake model's delay)."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while page.locator(selector).count() == 0:
        assert page.locator(".role-assistant").count() == 0, f"the reply came before {selector!r} was seen"
        assert time.monotonic() < deadline, f"{selector!r} never appeared"
        time.sleep(0.03)


# Top-bar buttons that a phone keeps in the conversations drawer instead (static/css/accounts.css).
DRAWER_TWINS = {
    "#memories-toggle": "#drawer-memories-button",
    "#logout-button": "#drawer-logout-button",
    "#account-button": "#drawer-account-button",
    "#admin-button": "#drawer-admin-button",
}


def topbar_button(page: Any, selector: str) -> str:
    """The selector to press for a top-bar button at this width: the button itself, or on a
    phone its twin in the conversations drawer (the drawer is opened first)."""
    if page.locator(selector).is_visible():
        return selector
    if not page.evaluate("document.body.classList.contains('drawer-open')"):
        page.click("#sessions-toggle")
        page.wait_for_selector("body.drawer-open")
    return DRAWER_TWINS[selector]


def click_topbar(page: Any, selector: str) -> None:
    page.click(topbar_button(page, selector))


def send(page: Any, text: str) -> None:
    page.fill("#composer-input", text)
    page.press("#composer-input", "Enter")


def rest(server: dict[str, str], method: str, path: str, **kwargs: Any) -> Any:
    """The HTTP API as another client of the same user (Bearer token); answers the JSON."""
    response = requests.request(
        method, server["base"] + path, headers={"Authorization": f"Bearer {server['token']}"}, timeout=5, **kwargs
    )
    assert response.status_code < 400, response.text
    return response.json()


def open_session_id(page: Any) -> str:
    """The id of the chat on screen (the page keeps it in localStorage)."""
    session_id = page.evaluate("localStorage.getItem('orchestrator.lastSession')")
    assert session_id, "no chat is open"
    return session_id


def wait_turn_over(server: dict[str, str], session_id: str) -> None:
    """Block until the session has no running turn (polled through the API)."""
    _wait_active_turn(server, session_id, running=False)


def wait_turn_running(server: dict[str, str], session_id: str) -> None:
    """Block until the session has a running turn (polled through the API)."""
    _wait_active_turn(server, session_id, running=True)


def _wait_active_turn(server: dict[str, str], session_id: str, *, running: bool) -> None:
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while (rest(server, "GET", f"/sessions/{session_id}")["active_turn"] is not None) != running:
        assert time.monotonic() < deadline, f"the turn never {'started' if running else 'ended'}"
        time.sleep(0.02)


def server_dir(server: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temp folder of the module's `server` (database, data, log): the one whose admin
    token file holds this server's token (tokens are random, so exactly one matches)."""
    found = {
        path.parent.resolve()
        for path in tmp_path_factory.getbasetemp().glob("ui-server*/admin.token")
        if path.read_text().strip() == server["token"]
    }  # a set: pytest adds a `ui-servercurrent` link
    assert len(found) == 1, f"no single folder holds this server's token: {found}"
    return found.pop()


def import_tasks(server: dict[str, str], tmp_path_factory: pytest.TempPathFactory, project_file: Path) -> str:
    """Load a task project into the running server's database the way an operator does
    (`python app.py import-tasks FILE`); answers the command's report line."""
    folder = server_dir(server, tmp_path_factory)
    env = {key: value for key, value in os.environ.items() if key not in SETTING_NAMES and not key.endswith("_API_KEY")}
    env.update(
        DATABASE_PATH=str(folder / "app.db"),
        DATA_DIR=str(folder / "data"),
        AUTH_TOKEN_FILE=str(folder / "admin.token"),
        JUDGE_ENABLED="0",
        PYTHONUNBUFFERED="1",
    )
    done = subprocess.run(
        [sys.executable, "app.py", "import-tasks", str(project_file)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


# --- a server with the real Docker judge (generated activities, Stop during a generation) ---


@contextmanager
def serve(llm: FakeLLMServer, folder: Path, **settings: str) -> Iterator[dict[str, str]]:
    """Run the real server (`python app.py`) on a free port with its files in `folder` and the
    model at the fake `llm`; `settings` are extra environment settings (e.g. JUDGE_ENABLED="1").
    Yields its base URL, the admin token and its process id (the judge labels its containers
    with it)."""
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in SETTING_NAMES and not key.endswith("_API_KEY")}
    env.update(
        HOST="127.0.0.1",
        PORT=str(port),
        PYTHONUNBUFFERED="1",
        DATABASE_PATH=str(folder / "app.db"),
        DATA_DIR=str(folder / "data"),
        AUTH_TOKEN_FILE=str(folder / "admin.token"),
        # a fake that hangs (a test of Stop) is cut by the first-token deadline before the test gives up
        LLM_PROVIDER="openai",
        LLM_BASE_URL=llm.openai_base_url,
        LLM_MODEL="fake",
        LLM_TIMEOUT_S="30",
        JUDGE_ENABLED="0",
        SECRET_KEY="browser-test-secret",
        # every test logs in again and starts chats: the per-user limits are tested in test_limits.py
        RATE_LIMITS="turns=off,login=off,sessions=off",
    )
    env.update(settings)
    log_path = folder / "server.log"
    log = log_path.open("w")
    process = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_serving(process, f"{base}/health", log_path)
        yield {"base": base, "token": (folder / "admin.token").read_text().strip(), "pid": str(process.pid)}
    finally:
        stop_process(process, log)


@pytest.fixture(scope="module")
def judge_server(llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The real server with the real Docker judge (no pre-started containers: a pool would only
    load the shared cores); skips without an engine, fails when JUDGE_REQUIRED=1 (CI)."""
    from tests.judge_support import require_judge  # here: imported before pytest loads it as a plugin, it warns

    require_chromium()
    with serve(
        llm,
        tmp_path_factory.mktemp("ui-judge-server"),
        JUDGE_ENABLED="1",
        JUDGE_POOL_SIZE="0",
        RATE_LIMITS="turns=off,login=off,sessions=off,generate=off",
    ) as found:
        judge = requests.get(found["base"] + "/health", timeout=5).json()["judge"]
        require_judge(judge["available"], str(judge.get("reason")))
        yield found


def judge_containers(server: dict[str, str]) -> list[str]:
    """Names of the judge containers the server process `server` still has on the engine."""
    import docker

    client = docker.from_env()
    try:
        return [c.name for c in client.containers.list(all=True, filters={"label": f"{PID_LABEL}={server['pid']}"})]
    finally:
        client.close()


def log_in(page: Any, server: dict[str, str]) -> None:
    """Open the app on `server`, log in with the admin token and start a new chat."""
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(server["base"] + "/")
    page.click("#login-use-token")  # the form asks for a name and password first
    page.fill("#login-token", server["token"])
    page.press("#login-token", "Enter")
    page.wait_for_selector("#app-view[aria-busy='false']")
    page.click("#new-session")
    page.wait_for_selector("#app-view[aria-busy='false']")


@pytest.fixture
def judge_ui(judge_server: dict[str, str], page: Any, llm: FakeLLMServer) -> Iterator[Any]:
    """A logged-in page on the judge server; fails the test if a dialog opened, a script was
    injected, or a judge container outlived the test."""
    llm.reset()
    dialogs: list[str] = []

    def refuse(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", refuse)
    log_in(page, judge_server)
    yield page
    assert dialogs == [], f"a dialog opened: {dialogs}"
    assert page.evaluate(XSS_MARKER) is None, "injected script ran"
    assert judge_containers(judge_server) == [], "a judge container outlived the test"
