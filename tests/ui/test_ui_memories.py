"""The memory page in a real browser (issue 26 item 7, `static/js/memories.js`): list, search,
edit inline, delete after an inline confirmation; keyboard only; desktop and phone widths;
axe-core finds no serious or critical violation in the dialog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from tests.ui_support import ROOT, require_axe, rest, shot, topbar_button

pytestmark = [pytest.mark.browser]

AXE = next(
    (
        path
        for path in (
            ROOT / "web/node_modules/axe-core/axe.min.js",
            Path("/work/main/web/node_modules/axe-core/axe.min.js"),
        )
        if path.is_file()
    ),
    None,
)


def memories(server: dict[str, str]) -> list[dict[str, Any]]:
    return rest(server, "GET", "/api/memories")["memories"]


def clear(server: dict[str, str]) -> None:
    for memory in memories(server):
        response = requests.delete(
            f"{server['base']}/api/memories/{memory['id']}",
            headers={"Authorization": f"Bearer {server['token']}"},
            timeout=5,
        )
        assert response.status_code == 204


def open_by_keyboard(ui: Any) -> Any:
    ui.focus(topbar_button(ui, "#memories-toggle"))
    ui.keyboard.press("Enter")
    dialog = ui.locator("#memories-dialog")
    expect(dialog).to_be_visible()
    assert ui.evaluate("document.activeElement.id") == "memories-search"
    return dialog


def tab_to(ui: Any, selector: str, *, back: bool = False, limit: int = 30) -> None:
    """Press Tab (or Shift+Tab) until `selector` has the focus."""
    for _ in range(limit):
        if ui.evaluate("(s) => document.activeElement?.matches(s)", selector):
            return
        ui.keyboard.press("Shift+Tab" if back else "Tab")
    raise AssertionError(f"the keyboard never reached {selector}")


def no_serious_axe_violations(ui: Any) -> None:
    if AXE is None:
        require_axe("axe-core is not installed (web/node_modules)")
    ui.evaluate(AXE.read_text(encoding="utf-8") + "\n;0")  # not a <script>: the page's CSP allows none inline
    found = ui.evaluate(
        """async () => (await axe.run(document.getElementById('memories-dialog')))
            .violations.filter(v => ['serious', 'critical'].includes(v.impact)).map(v => v.id + ': ' + v.help)"""
    )
    assert found == []


def test_empty_state_explains_what_memories_are(ui: Any, server: dict[str, str]) -> None:
    clear(server)
    dialog = open_by_keyboard(ui)
    status = ui.locator("#memories-status")
    expect(status).to_contain_text("No memories yet")
    assert "remember" in status.inner_text()
    assert dialog.locator(".memory-item").count() == 0
    shot(ui, "care-memories-empty")
    no_serious_axe_violations(ui)
    ui.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    assert ui.evaluate("document.activeElement.id") == "memories-toggle"  # the focus comes back


def test_list_search_edit_and_delete_by_keyboard(ui: Any, server: dict[str, str]) -> None:
    clear(server)
    for fact in ("My cat is called Tigger", "I live in Lyon", "Tigger likes tuna"):
        rest(server, "POST", "/api/memories", json={"content": fact})
    dialog = open_by_keyboard(ui)
    items = dialog.locator(".memory-item .memory-text")
    expect(items).to_have_count(3)
    assert items.all_inner_texts() == ["Tigger likes tuna", "I live in Lyon", "My cat is called Tigger"]
    shot(ui, "care-memories-list")

    ui.keyboard.type("tigger")  # the focus is in the search box: results follow the typing
    expect(items).to_have_count(2)
    assert sorted(items.all_inner_texts()) == ["My cat is called Tigger", "Tigger likes tuna"]
    expect(ui.locator("#memories-status")).to_contain_text("2 matching memories")
    shot(ui, "care-memories-search")

    # edit inline: Tab to the first Edit, Enter, change the text, Tab to Save, Enter
    tab_to(ui, ".memory-item .memory-edit")
    ui.keyboard.press("Enter")
    editor = dialog.locator(".memory-editor")
    expect(editor).to_be_focused()
    ui.keyboard.press("Control+a")
    ui.keyboard.type("Tigger likes salmon")
    shot(ui, "care-memories-edit")
    tab_to(ui, "button[type=submit].primary")
    ui.keyboard.press("Enter")
    expect(ui.locator("#memories-status")).to_have_text("Memory saved.")
    assert "Tigger likes salmon" in [m["content"] for m in memories(server)]
    expect(dialog.locator(".memory-item .memory-edit").first).to_be_focused()

    # Escape while editing ends the edit only
    ui.keyboard.press("Enter")
    expect(editor).to_be_focused()
    ui.keyboard.press("Escape")
    expect(dialog).to_be_visible()
    expect(dialog.locator(".memory-editor")).to_have_count(0)

    # delete: the confirmation comes first, with the focus on "Keep it"
    tab_to(ui, ".memory-item .memory-delete")
    ui.keyboard.press("Enter")
    expect(dialog.locator(".memory-keep")).to_be_focused()
    shot(ui, "care-memories-confirm-delete")
    ui.keyboard.press("Escape")  # Escape keeps the memory, and the focus goes back to its Delete
    expect(dialog).to_be_visible()
    expect(dialog.locator(".memory-item .memory-delete").first).to_be_focused()
    ui.keyboard.press("Enter")
    expect(dialog.locator(".memory-keep")).to_be_focused()
    ui.keyboard.press("Shift+Tab")
    expect(dialog.locator(".memory-confirm")).to_be_focused()
    ui.keyboard.press("Enter")
    expect(ui.locator("#memories-status")).to_have_text("Memory deleted.")
    expect(items).to_have_count(1)
    assert len(memories(server)) == 2
    no_serious_axe_violations(ui)
    ui.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


def test_add_a_memory_and_the_phone_layout(ui: Any, server: dict[str, str]) -> None:
    clear(server)
    ui.set_viewport_size({"width": 390, "height": 844})
    expect(ui.locator("#memories-toggle")).to_be_hidden()  # a phone keeps it in the drawer
    dialog = open_by_keyboard(ui)
    tab_to(ui, "#memories-new")
    ui.keyboard.type("I prefer metric units")
    tab_to(ui, "#memories-add button[type=submit]")
    ui.keyboard.press("Enter")
    expect(dialog.locator(".memory-item .memory-text")).to_have_text(["I prefer metric units"])
    assert [m["content"] for m in memories(server)] == ["I prefer metric units"]
    box = dialog.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert ui.evaluate("document.documentElement.scrollWidth") <= 390  # nothing sticks out
    shot(ui, "care-memories-phone")
    ui.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
