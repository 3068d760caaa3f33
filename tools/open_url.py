"""`/open_url <url>`: one page's readable text, fetched through `tools/safe_http.py`.

HTML is parsed where its time and memory are bounded: in a page worker of the app's worker
pool (`bounded/html_text.py`, `kinds.PAGES`, lxml and trafilatura imported once per worker)
with `PARSE_MEMORY_MB` of address space, killed after `PARSE_WALL_S` (waiting for a free
worker included). There a streaming pass (lxml events, no tree) takes the title and the text
outside scripts, menus and footers; pages of at most `RICH_MAX_ELEMENTS` elements then go
through trafilatura for the main content (menus and footers dropped), whose text wins when it
finds any. Other text types (plain, JSON, XML…) come back as they are (JSON pretty-printed
when small).
Every field of the output is capped: the text at `MAX_CHARS` with a note, the title at
`MAX_TITLE_CHARS`, the URLs and the content type at `MAX_URL_CHARS`. Binary content is refused
by safe_http, naming its type.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from pydantic import Field

from bounded.jobs import Done, Failure, Job, Limits
from bounded.kinds import PAGES
from bounded.pool import pool_or_own
from foundation.cancellation import Cancelled
from tools.base import READ_ONLY_WEB, CommandBinding, ErrorCode, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput
from tools.safe_http import FetchResult, safe_get

MAX_CHARS = 20_000
MAX_TITLE_CHARS = 300
MAX_URL_CHARS = 2048
MAX_PRETTY_JSON_BYTES = 256 * 1024  # larger JSON is shown as sent (pretty-printing costs memory per value)
PARSE_WALL_S = 10.0  # the parser's deadline (also at most the tool's)
PARSE_MEMORY_MB = PAGES.memory_mb  # address space parsing one page may add in the worker
PARSE_ANSWER_BYTES = 256 * 1024  # MAX_CHARS + MAX_TITLE_CHARS, JSON-escaped, fit
RICH_MAX_ELEMENTS = 20_000  # pages with more elements get the streamed text only
RICH_BUDGET_S = 5.0  # trafilatura's share of PARSE_WALL_S
HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def capped(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: limit - 1] + "…"


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


def html_text(page: FetchResult, ctx: ToolContext) -> tuple[str | None, str, int]:
    """(title, readable text capped at MAX_CHARS, total characters) of an HTML page, parsed in a worker."""
    wall_s = ctx.remaining(PARSE_WALL_S)
    job = Job(
        "bounded.html_text:extract",
        {
            "url": page.url,
            "charset": page.charset,
            "max_chars": MAX_CHARS,
            "max_title_chars": MAX_TITLE_CHARS + 1,
            "rich_max_elements": RICH_MAX_ELEMENTS,
            "rich_budget_s": min(RICH_BUDGET_S, wall_s / 2),
        },
        (page.body,),
    )
    with pool_or_own(ctx.bounded) as pool:
        outcome = pool.run(
            PAGES, job, Limits(wall_s=wall_s, output_bytes=PARSE_ANSWER_BYTES), ctx.cancel, user=ctx.user_id
        )
    if isinstance(outcome, Done):
        value = outcome.value
        title = value.get("title")
        return (
            (capped(title, MAX_TITLE_CHARS) if title else None),
            str(value["text"])[:MAX_CHARS],
            int(value["total_chars"]),
        )
    if outcome.kind is Failure.CANCELLED:
        raise Cancelled()
    if outcome.busy:
        raise ToolFailure(
            ErrorCode.BUSY,
            f"the server is busy with other work: {outcome.waited_s:.0f} of the "
            f"{wall_s:.0f} s for parsing went waiting for a free worker; "
            "try again in a moment.",
        )
    why = {
        Failure.MEMORY: f"needs more than {PARSE_MEMORY_MB} MB to parse",
        Failure.TIMEOUT: f"took longer than {wall_s:.0f} s to parse",
    }.get(outcome.kind, "could not be parsed")
    raise ToolFailure(
        ErrorCode.UPSTREAM_ERROR, f"{capped(page.url, 200)} {why} (too large or too complex); try another page."
    )


def plain_text(page: FetchResult) -> str:
    text = page.text()
    is_json = page.content_type == "application/json" or page.content_type.endswith("+json")
    if is_json and len(page.body) <= MAX_PRETTY_JSON_BYTES:
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except (ValueError, RecursionError):
            pass  # not valid JSON after all (or nested too deeply to re-indent): show it as sent
    return text.strip()


def open_url(data: OpenUrlInput, ctx: ToolContext) -> OpenUrlOutput:
    url = data.url
    if not urlsplit(url).scheme and "." in url.split("/", 1)[0]:
        url = f"https://{url}"  # "example.com/page": the model left out the scheme
    page = safe_get(url, ctx)
    if page.content_type in HTML_TYPES:
        title, text, total = html_text(page, ctx)
    else:
        title, text = None, plain_text(page)
        total = len(text)
    if not text and not title:
        raise ToolFailure(ErrorCode.NOT_FOUND, f"{capped(page.url, 200)} has no readable text; try another page.")
    return OpenUrlOutput(
        url=url,
        final_url=capped(page.url, MAX_URL_CHARS),
        title=title,
        content_type=capped(page.content_type, MAX_URL_CHARS),
        text=text[:MAX_CHARS],
        truncated=total > MAX_CHARS,
        total_chars=total,
    )


OPEN_URL_TOOL = Tool(
    name="open_url",
    annotations=READ_ONLY_WEB,  # served over /mcp: reads a page of the web
    description="Fetch one web page (http/https, public addresses only) and return its readable text.",
    input_model=OpenUrlInput,
    output_model=OpenUrlOutput,
    handler=open_url,
    result_role="open_url_tools",
    command=CommandBinding(
        name="open_url",
        usage="/open_url <url>",
        example="/open_url https://en.wikipedia.org/wiki/Mars_rover",
        request="Summarise https://en.wikipedia.org/wiki/Mars_rover for me.",
        args_field="url",
    ),
    timeout_s=30.0,
    budget="turns",  # a direct call reaches the web
)
