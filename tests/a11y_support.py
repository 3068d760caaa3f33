"""Accessibility checks in the browser: axe-core run on the page, serious/critical findings listed.

axe-core comes from npm (web/node_modules, for tests only; never served by the app). It is
loaded with Playwright's `add_init_script`, which the browser runs through its debugging
protocol before the page's own scripts: the page keeps its real Content-Security-Policy
(`script-src 'self'`, which refuses `add_script_tag`'s inline script) and nothing is routed
or bypassed, so what axe sees is exactly what users get.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
AXE = ROOT / "web" / "node_modules" / "axe-core" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
BLOCKING = ("serious", "critical")
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = {"desktop": DESKTOP, "phone": PHONE}


def add_axe(context: Any) -> None:
    """Make `window.axe` available in every page of this browser context."""
    assert AXE.is_file(), f"axe-core is missing at {AXE} (scripts/setup.sh installs web/node_modules)"
    context.add_init_script(path=str(AXE))


def violations(page: Any, impacts: tuple[str, ...] = BLOCKING) -> list[dict[str, Any]]:
    """axe's violations on the page as it is now, only those of the given impacts."""
    found = page.evaluate(
        """async (tags) => {
            const result = await axe.run(document, { runOnly: { type: "tag", values: tags }, resultTypes: ["violations"] });
            return result.violations.map((v) => ({
                id: v.id, impact: v.impact, help: v.help,
                nodes: v.nodes.map((n) => ({ target: n.target.join(" "), summary: n.failureSummary || "" })),
            }));
        }""",
        TAGS,
    )
    return [violation for violation in found if violation["impact"] in impacts]


def describe(found: list[dict[str, Any]]) -> str:
    """The violations as lines a person can act on: rule, impact, what, where, why."""
    lines = []
    for violation in found:
        lines.append(f"- {violation['id']} ({violation['impact']}): {violation['help']}")
        for node in violation["nodes"][:8]:
            why = " ".join(node["summary"].split())[:300]
            lines.append(f"    at {node['target']}: {why}")
    return "\n".join(lines)


def assert_accessible(page: Any, what: str) -> None:
    found = violations(page)
    assert not found, f"axe found serious/critical violations on {what}:\n{describe(found)}"


def focus_ring(page: Any) -> dict[str, Any]:
    """The focused element and whether it shows a focus outline (keyboard tests)."""
    ring: dict[str, Any] = page.evaluate(
        """() => {
            const el = document.activeElement;
            const style = el ? getComputedStyle(el) : null;
            const ring = style && style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0;
            const within = el && el.closest(":focus-within") && [...document.querySelectorAll(":focus-within")]
                .some((box) => box !== el && getComputedStyle(box).outlineStyle !== "none" && box.contains(el) && box.tagName === "LABEL");
            return {
                tag: el ? el.tagName : null, id: el ? el.id : null, cls: el ? String(el.className) : null,
                text: el ? (el.getAttribute("aria-label") || el.textContent || "").trim().slice(0, 40) : null,
                body: el === document.body || el === null, visible: Boolean(ring || within),
            };
        }"""
    )
    return ring
