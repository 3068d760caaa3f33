"""`/open_url <url>`: one page's readable text, fetched through `tools/safe_http.py`.

HTML goes through trafilatura (main content without menus and footers); when it finds
nothing (short pages, link lists, odd markup) BeautifulSoup's `get_text` of the body is used
instead, so the model never gets an empty answer for a page that has text. Other text types
(plain, JSON, XML…) come back as they are. The text is capped at `MAX_CHARS` with a note, so
one page cannot flood the context. Binary content is refused by safe_http, naming its type.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import urlsplit

from bs4 import BeautifulSoup
from pydantic import Field

from tools.base import CommandBinding, ErrorCode, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput
from tools.safe_http import FetchResult, safe_get

log = logging.getLogger("tools.open_url")

MAX_CHARS = 20_000
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
NOISE_TAGS = ("script", "style", "noscript", "template", "svg", "iframe", "nav", "footer", "header", "form")


class OpenUrlInput(ToolInput):
    url: str = Field(min_length=1, max_length=2048, description="The http(s) URL of the page to read.")


class OpenUrlOutput(ToolOutput):
    url: str
    final_url: str
    title: str | None
    content_type: str
    text: str
    truncated: bool
    total_chars: int

    def render(self) -> str:
        lines = [f"Title: {self.title}" if self.title else "Title: (none)", f"URL: {self.final_url}"]
        if self.final_url != self.url:
            lines.append(f"(redirected from {self.url})")
        lines.append(f"Content-Type: {self.content_type}")
        lines.append("")
        lines.append(self.text or "(the page has no readable text)")
        if self.truncated:
            lines.append("")
            lines.append(f"[truncated: showing the first {len(self.text):,} of {self.total_chars:,} characters]")
        return "\n".join(lines)


def _soup_text(soup: BeautifulSoup) -> str:
    for tag in soup(NOISE_TAGS):
        tag.decompose()
    root = soup.body or soup
    lines = (" ".join(line.split()) for line in root.get_text("\n").splitlines())
    return "\n".join(line for line in lines if line)


def _trafilatura_text(html: str, url: str) -> str:
    """Main content by trafilatura; empty when it finds none or cannot be imported."""
    try:
        import trafilatura
    except ImportError:  # e.g. lxml without lxml_html_clean: fall back rather than fail the tool
        log.warning("trafilatura is unavailable; open_url uses BeautifulSoup text only", exc_info=True)
        return ""
    try:
        return trafilatura.extract(html, url=url, include_comments=False, include_tables=True,
                                   favor_recall=True, deduplicate=True) or ""
    except Exception:  # a parser crash on odd markup must not lose the page
        log.warning("trafilatura failed on %s", url, exc_info=True)
        return ""


def html_to_text(html: str, url: str) -> tuple[str | None, str]:
    """(title, readable text) of an HTML document."""
    soup = BeautifulSoup(html, "html.parser")
    title_tag = soup.find("title")
    title = " ".join(title_tag.get_text().split()) if title_tag else None
    text = _trafilatura_text(html, url).strip()
    if not text:
        text = _soup_text(soup)
    return title or None, text


def page_text(page: FetchResult) -> tuple[str | None, str]:
    if page.content_type in HTML_TYPES:
        return html_to_text(page.text(), page.url)
    text = page.text()
    if page.content_type == "application/json" or page.content_type.endswith("+json"):
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            pass  # not valid JSON after all: show it as sent
    return None, text.strip()


def open_url(data: OpenUrlInput, ctx: ToolContext) -> OpenUrlOutput:
    url = data.url
    if not urlsplit(url).scheme and "." in url.split("/", 1)[0]:
        url = f"https://{url}"  # "example.com/page": the model left out the scheme
    page = safe_get(url, ctx)
    title, text = page_text(page)
    if not text and not title:
        raise ToolFailure(ErrorCode.NOT_FOUND, f"{page.url} has no readable text; try another page.")
    total = len(text)
    return OpenUrlOutput(url=url, final_url=page.url, title=title, content_type=page.content_type,
                         text=text[:MAX_CHARS], truncated=total > MAX_CHARS, total_chars=total)


OPEN_URL_TOOL = Tool(
    name="open_url",
    description="Fetch one web page (http/https, public addresses only) and return its readable text.",
    input_model=OpenUrlInput,
    output_model=OpenUrlOutput,
    handler=open_url,
    result_role="open_url_tools",
    command=CommandBinding(name="open_url", usage="/open_url <url>",
                           example="/open_url https://en.wikipedia.org/wiki/Mars_rover", args_field="url"),
    timeout_s=30.0,
)
