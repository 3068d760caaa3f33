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

Input: one frame, the page's bytes. Answer: `{"title", "text", "total_chars", "elements", "method"}`.
`warm_up` runs one small page through both passes when the worker starts, before its memory
limit, so the imports trafilatura makes on its first call are not paid by a job's budget.
"""

from __future__ import annotations

import signal
from typing import Any

import trafilatura
from lxml import etree

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
        self.title: list[str] = []
        self.title_raw = 0
        self.in_title = self.title_done = False

    def start(self, tag: Any, attrib: Any) -> None:
        self.elements += 1
        name = tag.lower() if isinstance(tag, str) else ""
        if name == "title" and not self.title_done and not self.in_title:
            self.in_title = True
        elif name in NOISE_TAGS and name != "head":
            self.noise += 1
        if name in BLOCK_TAGS:
            self._flush()

    def end(self, tag: Any) -> None:
        name = tag.lower() if isinstance(tag, str) else ""
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
        if self.noise:
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
    """trafilatura's main text within `budget_s`; empty when it finds none, fails or runs out."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, budget_s)
    try:
        return (
            trafilatura.extract(
                html, url=url, include_comments=False, include_tables=True, favor_recall=True, deduplicate=True
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
