"""Accounts in the browser (SPEC 17), desktop and phone: signing in with a name and password, the
Account dialog (password, API tokens used with curl-like requests against /chat and /v1), the
admin's Users dialog (create, disable/enable, reset a password, a user's tokens), and sign-up
hidden when off and working when on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from testing.fake_llm import FakeLLMServer
from testing.waiting import wait_until
from tests.ui_support import TIMEOUT_MS, click_topbar, log_in, require_chromium, serve, shot

SIZES = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def admin_call(server: dict[str, str], method: str, path: str, **kwargs: Any) -> requests.Response:
    headers = {"Authorization": f"Bearer {server['token']}"}
    return requests.request(method, server["base"] + path, headers=headers, timeout=30, **kwargs)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def focused_id(page: Any) -> str:
    return str(page.evaluate("document.activeElement && document.activeElement.id"))


def wait_for_focus(page: Any, *ids: str) -> None:
    """Until the focus is on one of `ids`: a closed dialog gives the focus back with its `close`
    event, a moment after it is hidden (polled here: the page's CSP refuses wait_for_function)."""
    wait_until(
        lambda: focused_id(page) in ids,
        f"the focus never reached {ids}",
        TIMEOUT_MS / 1000,
    )


def open_sign_in(page: Any, server: dict[str, str], size: str) -> None:
    page.set_viewport_size(SIZES[size])
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(server["base"] + "/")
    page.wait_for_selector("#login-view:not([hidden])")


def open_from_menu(page: Any, which: str, size: str) -> str:
    """Open the Account or Admin dialog as a user does at this size (on a phone the buttons are
    in the conversations drawer); answers the ids the focus may return to."""
    if size == "phone":
        page.click("#sessions-toggle")
        drawer_left = "document.getElementById('sessions-panel').getBoundingClientRect().left"
        wait_until(lambda: page.evaluate(drawer_left) >= 0, "the drawer never slid in", TIMEOUT_MS / 1000)
        shot(page, f"accounts-drawer-{which}-phone")
        page.click(f"#drawer-{which}-button")
        return f"drawer-{which}-button sessions-toggle"
    page.click(f"#{which}-button")
    return f"{which}-button"


def sign_in(page: Any, name: str, password: str) -> None:
    page.fill("#login-name", name)
    page.fill("#login-password", password)
    page.press("#login-password", "Enter")


@pytest.mark.parametrize("size", SIZES)
def test_sign_in_with_a_password_then_keep_tokens_for_curl_and_v1(
    server: dict[str, str], page: Any, llm: FakeLLMServer, size: str
) -> None:
    llm.reset()
    name = f"pat-{size}"
    made = admin_call(server, "POST", "/api/admin/users", json={"name": name, "password": "first password"})
    assert made.status_code == 201, made.text

    open_sign_in(page, server, size)
    assert page.is_hidden("#signup-open")  # sign-up is off on this server
    assert page.is_hidden("#login-token")
    wait_for_focus(page, "login-name")
    shot(page, f"accounts-signin-{size}")
    sign_in(page, name, "wrong password")
    page.wait_for_selector("#login-error:has-text('Wrong name or password')")
    sign_in(page, name, "first password")
    page.wait_for_selector("#app-view:not([hidden])")
    assert page.is_hidden("#admin-button") and page.is_hidden("#drawer-admin-button")  # not an admin
    if size == "phone":
        assert page.evaluate("document.documentElement.scrollWidth") <= SIZES["phone"]["width"]

    back_to = open_from_menu(page, "account", size)
    dialog = page.locator("#account-dialog")
    dialog.wait_for(state="visible")
    assert name in dialog.locator("#account-who").inner_text()
    page.fill("#token-label", "my curl")
    page.click("#token-form button[type=submit]")
    page.wait_for_selector("#token-secret-box:not([hidden]) .secret-value")
    secret = page.input_value("#token-secret-box .secret-value")
    assert secret.startswith("oct_")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server["base"])
    page.click("#token-secret-box button:has-text('Copy')")
    page.wait_for_selector("#token-secret-box .form-status:has-text('Copied.')")
    assert page.evaluate("navigator.clipboard.readText()") == secret
    page.wait_for_selector("#token-list li:has-text('my curl')")
    shot(page, f"accounts-account-{size}")

    chat = requests.post(server["base"] + "/chat", json={"message": "hello"}, headers=bearer(secret), timeout=30)
    assert chat.status_code == 200 and chat.json()["reply"] == "ok"
    completion = requests.post(
        server["base"] + "/v1/chat/completions",
        json={"model": "orchestrator", "messages": [{"role": "user", "content": "hi"}]},
        headers=bearer(secret),
        timeout=30,
    )
    assert completion.status_code == 200, completion.text

    page.click("#token-list button[aria-label='Revoke token my curl']")
    page.wait_for_selector("#tokens-status:has-text('Revoked')")
    assert requests.get(server["base"] + "/v1/models", headers=bearer(secret), timeout=30).status_code == 401

    page.fill("#password-current", "first password")
    page.fill("#password-new", "second password")
    page.fill("#password-repeat", "second password")
    page.click("#password-form button[type=submit]")
    page.wait_for_selector("#password-status:has-text('Password changed')")
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    wait_for_focus(page, *back_to.split())  # the dialog gave the focus back

    click_topbar(page, "#logout-button")
    page.wait_for_selector("#login-view:not([hidden])")
    sign_in(page, name, "second password")
    page.wait_for_selector("#app-view:not([hidden])")


@pytest.mark.parametrize("size", SIZES)
def test_the_admin_creates_disables_and_resets_a_user_and_their_tokens(
    server: dict[str, str], page: Any, llm: FakeLLMServer, size: str
) -> None:
    llm.reset()
    log_in(page, server)  # (it starts a chat from the drawer's button: visible at desktop width)
    page.set_viewport_size(SIZES[size])
    back_to = open_from_menu(page, "admin", size)
    page.locator("#admin-dialog").wait_for(state="visible")
    wait_for_focus(page, "admin-new-name")
    name = f"quinn-{size}"
    page.fill("#admin-new-name", name)
    page.fill("#admin-new-password", "quinn's password")
    page.check("#admin-new-token")
    page.click("#admin-create-form button[type=submit]")
    page.wait_for_selector("#admin-secret-box:not([hidden]) .secret-value")
    first_token = page.input_value("#admin-secret-box .secret-value")
    page.wait_for_selector(f"#admin-user-list li:has-text('{name}')")
    shot(page, f"accounts-admin-{size}")
    assert requests.get(server["base"] + "/sessions", headers=bearer(first_token), timeout=30).status_code == 200

    page.click(f"#admin-user-list button[aria-label='Disable {name}']")
    page.wait_for_selector(f"#admin-status:has-text('{name} is disabled')")
    refused = requests.get(server["base"] + "/sessions", headers=bearer(first_token), timeout=30)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "account_disabled"
    page.click(f"#admin-user-list button[aria-label='Enable {name}']")
    page.wait_for_selector(f"#admin-status:has-text('{name} is enabled')")
    assert requests.get(server["base"] + "/sessions", headers=bearer(first_token), timeout=30).status_code == 200

    page.click(f"#admin-user-list button[aria-label='Manage {name}']")
    page.wait_for_selector("#admin-user-detail:not([hidden])")
    page.select_option("#admin-role", "instructor")
    page.click("#admin-role-form button[type=submit]")
    page.wait_for_selector(f"#admin-status:has-text('{name} is now an instructor')")
    assert (
        requests.get(server["base"] + "/api/me", headers=bearer(first_token), timeout=30).json()["role"] == "instructor"
    )
    page.fill("#admin-reset-password", "a reset password")
    page.click("#admin-reset-form button[type=submit]")
    page.wait_for_selector("#admin-status:has-text('New password set')")
    login = requests.post(
        server["base"] + "/api/login", json={"name": name, "password": "a reset password"}, timeout=30
    )
    assert login.status_code == 200

    page.fill("#admin-token-label", "for quinn")
    page.click("#admin-token-form button[type=submit]")
    page.wait_for_selector("#admin-token-list li:has-text('for quinn')")
    second_token = page.input_value("#admin-secret-box .secret-value")
    assert requests.get(server["base"] + "/v1/models", headers=bearer(second_token), timeout=30).status_code == 200
    page.locator("#admin-user-detail").scroll_into_view_if_needed()
    shot(page, f"accounts-admin-user-{size}")
    page.click("#admin-token-list button[aria-label='Revoke token for quinn']")
    page.wait_for_selector("#admin-status:has-text('Revoked')")
    assert requests.get(server["base"] + "/v1/models", headers=bearer(second_token), timeout=30).status_code == 401
    page.keyboard.press("Escape")
    page.locator("#admin-dialog").wait_for(state="hidden")
    wait_for_focus(page, *back_to.split())


@pytest.fixture(scope="module")
def signup_server(llm: FakeLLMServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_chromium()
    with serve(llm, tmp_path_factory.mktemp("ui-signup-server"), SIGNUP_ENABLED="1") as running:
        yield running


@pytest.mark.parametrize("size", SIZES)
def test_sign_up_when_the_operator_turns_it_on(signup_server: dict[str, str], page: Any, size: str) -> None:
    open_sign_in(page, signup_server, size)
    page.click("#signup-open")
    page.wait_for_selector("#login-title:has-text('Create an account')")
    wait_for_focus(page, "login-name")
    shot(page, f"accounts-signup-{size}")
    sign_in(page, f"newcomer-{size}", "short")  # the browser's own check: at least 8 characters
    assert page.is_visible("#login-view")
    sign_in(page, f"newcomer-{size}", "a good long password")
    page.wait_for_selector("#app-view:not([hidden])")
    assert page.inner_text("#user-name") == f"newcomer-{size}"
    click_topbar(page, "#logout-button")
    page.wait_for_selector("#login-view:not([hidden])")
    page.click("#signup-open")
    sign_in(page, f"newcomer-{size}", "another long password")
    page.wait_for_selector("#login-error:has-text('That name is taken')")
