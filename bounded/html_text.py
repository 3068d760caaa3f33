"""`/open_url`'s page parsing, run in a page worker (`kinds.PAGES`: lxml and trafilatura, warmed up once).

Two passes over one page, cheapest first:

1. A streaming pass: lxml's HTML parser calls a target (`_Collector`) for each tag and
   piece of text and builds no tree, so it costs a few bytes per open tag whatever the page
   holds. It keeps the first `<title>` (capped), the text outside noise elements (script,
   style, nav, ...) with a line break at each block element, capped at `max_chars`, and it
   counts the elements and all text characters.
2. Main-content extraction by trafilatura (menus and footers dropped), only for pages of at
   most `rich_max_elements` elements (its cost grows with the element count: a 2 MB page of
   tiny tags took 8 s and 370 MB) and within `rich_budget_s` (an interval timer stops it).
   When it fails, runs out of the child's memory, finds nothing, or the page is too large
   for it, the streaming pass's text is the answer.

Both passes drop what a browser would not show (`hides`), so a page cannot hand the model
text its reader never sees (an "ignore previous instructions" in a `display:none` block):
the `hidden` attribute, `aria-hidden="true"`, `<template>`, and an inline `style` with
`display:none`, `visibility:hidden`, `opacity:0`, `font-size:0`, a box of zero (or one
pixel) width or height with overflow hidden, off-screen positioning (absolute or fixed,
1000 px or more out; `text-indent` as far), `clip`/`clip-path` to nothing, or `scale(0)`.
Only attributes and inline styles are read: rules of `<style>` sheets (a class that hides
its elements) and scripts are not applied, nor text coloured like its background.

Input: one frame, the page's bytes. Answer: `{"title", "text", "total_chars", "elements", "method"}`.
`warm_up` runs one small page through both passes when the worker starts, before its memory
limit, so the imports trafilatura makes on its first call are not paid by a job's budget.
"""

from __future__ import annotations

import re
import signal
from typing import Any

import trafilatura
from lxml import etree
from trafilatura.utils import load_html

from bounded.child import Inputs

NOISE_TAGS = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "iframe",
        "nav",
        "footer",
        "header",
        "form",
        "head",
        "select",
        "button",
        "object",
        "math",
    }
)
BLOCK_TAGS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "br",
        "caption",
        "dd",
        "details",
        "dialog",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "hr",
        "li",
        "main",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "td",
        "th",
        "tr",
        "ul",
        "body",
        "html",
        "title",
    }
)
FEED_CHARS = 64 * 1024  # the page is fed to the parser in pieces of this size
OFFSCREEN_PX = 1000  # moved this far out (left, top, right, bottom, text-indent), an element is off-screen
TINY_PX = 1  # a box at most this wide or high with overflow hidden shows nothing (the "sr-only" pattern)
_PX_PER = {  # CSS units in px; font-relative ones at a 16 px font, viewport ones at a 1000 px viewport
    "": 1.0,  # a bare number: only 0 is valid CSS, and browsers in quirks mode read px
    "px": 1.0,
    "pt": 4 / 3,
    "pc": 16.0,
    "in": 96.0,
    "cm": 96 / 2.54,
    "mm": 96 / 25.4,
    "em": 16.0,
    "rem": 16.0,
    "ex": 8.0,
    "ch": 8.0,
    "vw": 10.0,
    "vh": 10.0,
    "vmin": 10.0,
    "vmax": 10.0,
}
_NUMBER = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))([a-z%]*)")
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_HIDING_XPATH = "//*[@hidden or @aria-hidden or @style] | //template"


def hides(attrib: Any) -> bool:
    """Whether an element with these attributes shows none of its content (see the module's docstring)."""
    if "hidden" in attrib or str(attrib.get("aria-hidden", "")).strip().lower() == "true":
        return True
    style = attrib.get("style")
    return bool(style) and style_hides(str(style))


def style_hides(style: str) -> bool:
    """Whether an inline style hides its element's content."""
    css: dict[str, str] = {}
    for declaration in _COMMENT.sub("", style).lower().split(";"):
        name, _, value = declaration.partition(":")
        css[name.strip()] = " ".join(value.replace("!important", "").split())  # the last one wins
    if css.get("display") == "none" or css.get("visibility") in ("hidden", "collapse"):
        return True
    if css.get("content-visibility") == "hidden" or _number(css.get("opacity")) == 0:
        return True
    if _px(css.get("font-size")) == 0:
        return True
    if any(css.get(name) in ("hidden", "clip") for name in ("overflow", "overflow-x", "overflow-y")):
        sizes = (_px(css.get(name)) for name in ("width", "height", "max-width", "max-height"))
        if any(size is not None and size <= TINY_PX for size in sizes):
            return True
    if css.get("position") in ("absolute", "fixed"):
        offsets = (_px(css.get(side)) for side in ("left", "top", "right", "bottom"))
        if any(offset is not None and offset <= -OFFSCREEN_PX for offset in offsets):
            return True
    indent = _px(css.get("text-indent"))
    if indent is not None and indent <= -OFFSCREEN_PX:
        return True
    return _clipped(css.get("clip", ""), css.get("clip-path", "")) or _scaled_to_nothing(css.get("transform", ""))


def _number(value: str | None) -> float | None:
    """A plain number or percentage (as a fraction); None for anything else."""
    match = _NUMBER.fullmatch(value or "")
    if match is None or match.group(2) not in ("", "%"):
        return None
    return float(match.group(1)) / (100 if match.group(2) == "%" else 1)


def _px(value: str | None) -> float | None:
    """A length in px; None for percentages, keywords, `calc()` and unknown units."""
    match = _NUMBER.fullmatch(value or "")
    if match is None or match.group(2) not in _PX_PER:
        return None
    return float(match.group(1)) * _PX_PER[match.group(2)]


def _arguments(value: str, function: str) -> list[str] | None:
    """The arguments of `function(...)` in a CSS value, split at commas and spaces."""
    match = re.search(rf"(?:^|[\s,]){function}\(([^)]*)\)", value)
    return match.group(1).replace(",", " ").split() if match else None


def _clipped(clip: str, clip_path: str) -> bool:
    """`clip: rect()` to a pixel at most, or `clip-path` to an empty inset, circle or ellipse."""
    rect = _arguments(clip, "rect")
    if rect and all((size := _px(side)) is not None and abs(size) <= TINY_PX for side in rect):
        return True
    inset = _arguments(clip_path, "inset")
    if inset:
        sides = [_number(side) if side.endswith("%") else None for side in inset[:4]]
        top, right, bottom, left = (sides * 4)[:4] if len(sides) == 1 else _box(sides)
        if (top is not None and bottom is not None and top + bottom >= 1) or (
            left is not None and right is not None and left + right >= 1
        ):
            return True
    for shape in ("circle", "ellipse"):
        radii = _arguments(clip_path, shape)
        if radii and _px(radii[0]) == 0:
            return True
    return False


def _box(sides: list[float | None]) -> tuple[float | None, ...]:
    """CSS's 1-4 value shorthand as (top, right, bottom, left)."""
    if len(sides) == 2:
        return sides[0], sides[1], sides[0], sides[1]
    if len(sides) == 3:
        return sides[0], sides[1], sides[2], sides[1]
    return tuple(sides[:4])


def _scaled_to_nothing(transform: str) -> bool:
    for function in ("scale", "scalex", "scaley", "scale3d"):
        factors = _arguments(transform, function)
        if factors and any(_number(factor) == 0 for factor in factors):
            return True
    return False


def drop_hidden(tree: Any) -> Any:
    """Remove the elements `hides` picks (and `<template>`) from an lxml.html tree, keeping
    the text that follows each; returns the tree."""
    for element in tree.xpath(_HIDING_XPATH):
        if element.tag == "template" or hides(element.attrib):
            if element.getparent() is None:
                element.clear()  # the root itself: nothing of it shows
            else:
                element.drop_tree()
    return tree


class _OutOfTime(BaseException):
    """Raised by the interval timer inside trafilatura (a BaseException, so no `except Exception` eats it)."""


class _Collector:
    """lxml parser target: title and readable text, capped, without building a tree."""

    def __init__(self, max_chars: int, max_title_chars: int) -> None:
        self.max_chars, self.max_title_chars = max_chars, max_title_chars
        self.lines: list[str] = []
        self.kept = 0  # characters in `lines`
        self.line: list[str] = []
        self.line_raw = 0  # raw characters in `line`
        self.total = 0  # characters of all readable text, kept or not
        self.elements = 0
        self.noise = 0  # depth inside noise elements
        self.hidden = 0  # depth inside an element that `hides`
        self.title: list[str] = []
        self.title_raw = 0
        self.in_title = self.title_done = False

    def start(self, tag: Any, attrib: Any) -> None:
        self.elements += 1
        name = tag.lower() if isinstance(tag, str) else ""
        if self.hidden or hides(attrib):  # the parser closes every element it opens, so depths match
            self.hidden += 1
        if name == "title" and not self.title_done and not self.in_title:
            self.in_title = True
        elif name in NOISE_TAGS and name != "head":
            self.noise += 1
        if name in BLOCK_TAGS:
            self._flush()

    def end(self, tag: Any) -> None:
        name = tag.lower() if isinstance(tag, str) else ""
        if self.hidden:
            self.hidden -= 1
        if name == "title" and self.in_title:
            self.in_title, self.title_done = False, True
        elif name in NOISE_TAGS and name != "head" and self.noise:
            self.noise -= 1
        if name in BLOCK_TAGS:
            self._flush()

    def data(self, text: str) -> None:
        if self.in_title:
            room = 4 * self.max_title_chars + 16 - self.title_raw  # whitespace is collapsed later
            if room > 0:
                self.title.append(text[:room])
                self.title_raw += min(len(text), room)
            return
        if self.noise or self.hidden:
            return
        self.total += sum(len(word) + 1 for word in text.split())
        room = 2 * (self.max_chars - self.kept) + 16 - self.line_raw
        if room > 0:
            self.line.append(text[:room])
            self.line_raw += min(len(text), room)

    def _flush(self) -> None:
        if self.line:
            line = " ".join("".join(self.line).split())
            if line and self.kept < self.max_chars:
                line = line[: self.max_chars - self.kept]
                self.lines.append(line)
                self.kept += len(line) + 1
            self.line, self.line_raw = [], 0

    def close(self) -> _Collector:
        self._flush()
        return self

    def title_text(self) -> str | None:
        title = " ".join("".join(self.title).split())[: self.max_title_chars]
        return title or None

    def text(self) -> str:
        return "\n".join(self.lines)[: self.max_chars]


def stream_text(html: str, max_chars: int, max_title_chars: int) -> _Collector:
    collector = _Collector(max_chars, max_title_chars)
    parser = etree.HTMLParser(
        target=collector, remove_comments=True, remove_pis=True, no_network=True, recover=True, huge_tree=False
    )
    for start in range(0, len(html), FEED_CHARS):
        parser.feed(html[start : start + FEED_CHARS])
    parser.close()
    return collector


def _alarm(_signum: int, _frame: object) -> None:
    raise _OutOfTime()


def main_content(html: str, url: str, budget_s: float) -> str:
    """trafilatura's main text within `budget_s`, hidden elements dropped first (parsed the way
    trafilatura parses); empty when it finds none, fails or runs out."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        tree = load_html(html)
        if tree is None:
            return ""
        return (
            trafilatura.extract(
                drop_hidden(tree),
                url=url,
                include_comments=False,
                include_tables=True,
                favor_recall=True,
                deduplicate=True,
            )
            or ""
        ).strip()
    except (_OutOfTime, MemoryError, RecursionError, Exception):
        return ""
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def extract(args: dict[str, Any], inputs: Inputs) -> dict[str, Any]:
    """The job: trafilatura gets `rich_budget_s`, but at most half of the time this job has left
    (it may have waited for a worker), so the streamed text is always answered in time."""
    html = decode(b"".join(inputs), args.get("charset"))
    return page_text(html, args, min(float(args["rich_budget_s"]), inputs.seconds_left() / 2))


def page_text(html: str, args: dict[str, Any], rich_budget_s: float) -> dict[str, Any]:
    max_chars, max_title_chars = int(args["max_chars"]), int(args["max_title_chars"])
    streamed = stream_text(html, max_chars, max_title_chars)
    text, total, method = streamed.text(), streamed.total, "stream"
    if streamed.elements <= int(args["rich_max_elements"]) and rich_budget_s > 0:
        rich = main_content(html, str(args["url"]), rich_budget_s)
        if rich:
            text, total, method = rich[:max_chars], len(rich), "trafilatura"
    return {
        "title": streamed.title_text(),
        "text": text,
        "total_chars": max(total, len(text)),
        "elements": streamed.elements,
        "method": method,
    }


WARM_UP_PAGES = (  # an article, and a page so short that trafilatura tries its fallbacks (jusText's stop lists)
    "<html><head><title>warm</title></head><body><article><h1>Warm up</h1>"
    + "<p>A paragraph of ordinary text, long enough for the extractor to keep it.</p>" * 5
    + "</article></body></html>",
    "<html><head><title>T</title></head><body><p>hello world</p></body></html>",
)


def warm_up() -> None:
    for page in WARM_UP_PAGES:
        page_text(
            page, {"url": "http://localhost/", "max_chars": 1000, "max_title_chars": 100, "rich_max_elements": 100}, 5.0
        )
