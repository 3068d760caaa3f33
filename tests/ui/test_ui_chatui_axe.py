"""axe-core on the screens of the everyday chat features (issue 26 items 1, 3, 4, 6): no
serious or critical violation with search results, Copy buttons, math, Jump to latest, the
delete dialog, at desktop and phone width. axe is injected past the page's CSP (a test-only
context option); the product's pages never load it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testing.fake_llm import FakeLLMServer
from tests.ui_support import require_axe, rest, send

pytestmark = [pytest.mark.browser]

AXE = Path(__file__).resolve().parents[2] / "web" / "node_modules" / "axe-core" / "axe.min.js"


@pytest.fixture
def browser_context_args(browser_context_args: dict[str, Any]) -> dict[str, Any]:
    return {**browser_context_args, "bypass_csp": True}


def serious(page: Any) -> list[str]:
    if not AXE.is_file():
        require_axe(f"axe-core is not installed at {AXE} (scripts/setup.sh)")
    page.add_script_tag(path=str(AXE))
    # highlight.js's theme colours (.hljs-*) predate these features; the theme work owns them
    found = page.evaluate(
        "async () => (await axe.run({exclude: [['[class^=hljs-]']]}, {resultTypes: ['violations']})).violations"
        ".filter(v => ['serious', 'critical'].includes(v.impact))"
        ".map(v => `${v.id}: ${v.nodes.map(n => n.target.join(' ')).join(', ')}`)"
    )
    return list(found)


@pytest.mark.parametrize(
    "viewport", [{"width": 1280, "height": 800}, {"width": 390, "height": 844}], ids=["desktop", "phone"]
)
def test_chat_feature_screens_have_no_serious_violation(
    ui: Any, llm: FakeLLMServer, server: dict[str, str], viewport: Any
) -> None:
    ui.set_viewport_size(viewport)
    llm.queue("Math $e^{i\\pi}+1=0$ and code:\n\n```python\nprint(1)\n```")
    send(ui, "hello searchable walrus")
    ui.wait_for_selector(".role-assistant[data-id] math")
    if viewport["width"] < 500:
        ui.get_by_role("button", name="Show conversations").click()
    ui.get_by_role("searchbox", name="Search your chats").fill("walrus")
    ui.keyboard.press("Enter")
    ui.locator("#chat-search-results .hit-open").first.wait_for()
    assert serious(ui) == []
    ui.locator(".session-item .session-delete").first.click()
    ui.get_by_role("dialog").wait_for()
    assert serious(ui) == []
    ui.keyboard.press("Escape")
    rest(server, "GET", "/sessions")
