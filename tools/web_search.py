"""`/web_search <query>`: titles, URLs and snippets from SearXNG or DuckDuckGo's HTML page.

Backends:
- `SEARCH_URL` set: a SearXNG instance, `GET {SEARCH_URL}/search?q=…&format=json`, whose
  answer holds `results: [{title, url, content, engine, …}]`. The instance must list `json`
  under `search.formats` in its settings.yml, else it answers 403.
- otherwise DuckDuckGo's no-JavaScript page, `POST https://html.duckduckgo.com/html/` with
  `q`; results are `a.result__a` links (wrapped as `//duckduckgo.com/l/?uddg=<url>`) and
  `.result__snippet` texts inside `div.result`; ads (`result--ad`) are skipped.

The search backend URL is chosen by the operator, not by a model, so it is deliberately NOT
put through the SSRF filter of `tools/safe_http.py` (a self-hosted SearXNG usually lives on
localhost or a private network). Only result URLs reach the model; opening them goes through
`/open_url`, which is filtered. Every request still gets its timeout from `ctx.remaining()`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import requests
from bs4 import BeautifulSoup, Tag
from pydantic import BaseModel, ConfigDict, Field

from tools.base import READ_ONLY_WEB, CommandBinding, ErrorCode, Tool, ToolContext, ToolFailure, ToolInput, ToolOutput
from tools.upstream import Upstream, refuse_http_error, send

MAX_RESULTS = 8
MAX_SNIPPET_CHARS = 400
REQUEST_TIMEOUT_S = 10.0
DDG_URL = "https://html.duckduckgo.com/html/"
USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
SEARXNG = Upstream(name="the search service", name_the_error=True)
DUCKDUCKGO = Upstream(name="DuckDuckGo", name_the_error=True)


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    title: str
    url: str
    snippet: str = ""


class WebSearchInput(ToolInput):
    query: str = Field(min_length=1, max_length=500, description="What to search the web for.")


class WebSearchOutput(ToolOutput):
    query: str
    backend: str
    results: list[SearchResult]

    def render(self) -> str:
        lines = [f"{len(self.results)} web results for “{self.query}” (via {self.backend}):"]
        for number, result in enumerate(self.results, start=1):
            lines.append(f"{number}. {result.title}")
            lines.append(f"   {result.url}")
            if result.snippet:
                lines.append(f"   {result.snippet}")
        lines.append("Use /open_url <url> to read one of these pages.")
        return "\n".join(lines)


def normalise_url(url: str) -> str:
    """The form used to spot duplicates: lower-case host without www., no fragment or trailing /."""
    parts = urlsplit(url.strip())
    host = (parts.hostname or "").lower().removeprefix("www.")
    default_port = {"http": 80, "https": 443}.get(parts.scheme.lower())
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host if port in (None, default_port) else f"{host}:{port}"
    return urlunsplit(("", netloc, parts.path.rstrip("/"), parts.query, ""))


def _clean(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def dedupe(results: list[SearchResult], limit: int = MAX_RESULTS) -> list[SearchResult]:
    """Keep the first of each normalised URL, http(s) only, at most `limit`."""
    seen: set[str] = set()
    kept: list[SearchResult] = []
    for result in results:
        if urlsplit(result.url).scheme.lower() not in {"http", "https"}:
            continue
        key = normalise_url(result.url)
        if key in seen:
            continue
        seen.add(key)
        kept.append(result)
        if len(kept) >= limit:
            break
    return kept


def _request(ctx: ToolContext, method: str, url: str, upstream: Upstream, **kwargs: Any) -> requests.Response:
    """One HTTP call with the deadline as timeout; transport problems become tool failures."""
    return send(
        upstream, method, url, timeout=ctx.remaining(REQUEST_TIMEOUT_S), headers={"User-Agent": USER_AGENT}, **kwargs
    )


def search_searxng(query: str, ctx: ToolContext, base_url: str) -> list[SearchResult]:
    response = _request(ctx, "GET", f"{base_url.rstrip('/')}/search", SEARXNG, params={"q": query, "format": "json"})
    if response.status_code == 403:
        raise ToolFailure(
            ErrorCode.UPSTREAM_ERROR,
            "the search service refused JSON output (HTTP 403; its settings.yml must list json under search.formats).",
        )
    refuse_http_error(SEARXNG, response)
    try:
        items = response.json().get("results") or []
    except (ValueError, AttributeError) as error:
        raise ToolFailure(
            ErrorCode.UPSTREAM_ERROR, "the search service sent an answer that is not JSON results."
        ) from error
    results = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("url"), str) and item["url"]:
            title = _clean(str(item.get("title") or item["url"]), 200)
            results.append(
                SearchResult(
                    title=title,
                    url=item["url"].strip(),
                    snippet=_clean(str(item.get("content") or ""), MAX_SNIPPET_CHARS),
                )
            )
    return results


def unwrap_ddg_url(href: str) -> str:
    """DuckDuckGo links point at its redirector; the target is the `uddg` parameter."""
    url = f"https:{href}" if href.startswith("//") else href
    parts = urlsplit(url)
    if (parts.hostname or "").endswith("duckduckgo.com") and parts.path == "/l/":
        target = parse_qs(parts.query).get("uddg")
        if target:
            return target[0]
    return url


def parse_ddg_html(html: str) -> list[SearchResult]:
    """Results from DuckDuckGo's HTML page, ads left out, in page order."""
    soup = BeautifulSoup(html, "html.parser")
    results = []
    for link in soup.select("a.result__a"):
        container = link.find_parent(class_="result")
        if isinstance(container, Tag) and "result--ad" in (container.get("class") or []):
            continue
        url = unwrap_ddg_url(str(link.get("href") or ""))
        if (urlsplit(url).hostname or "").endswith("duckduckgo.com"):
            continue  # ad redirects (/y.js) and internal links
        snippet_tag = container.select_one(".result__snippet") if isinstance(container, Tag) else None
        snippet = snippet_tag.get_text(" ") if snippet_tag else ""
        results.append(
            SearchResult(
                title=_clean(link.get_text(" "), 200) or url, url=url, snippet=_clean(snippet, MAX_SNIPPET_CHARS)
            )
        )
    return results


def search_duckduckgo(query: str, ctx: ToolContext) -> list[SearchResult]:
    response = _request(ctx, "POST", DDG_URL, DUCKDUCKGO, data={"q": query, "kl": "wt-wt"})
    if response.status_code == 202 or response.status_code >= 400:
        raise ToolFailure(
            ErrorCode.UPSTREAM_ERROR,
            f"DuckDuckGo refused the search (HTTP {response.status_code}, "
            "probably rate limiting); try again later, or the operator can set SEARCH_URL.",
        )
    return parse_ddg_html(response.text)


def web_search(data: WebSearchInput, ctx: ToolContext) -> WebSearchOutput:
    if ctx.settings.search_url:
        backend, found = "searxng", search_searxng(data.query, ctx, ctx.settings.search_url)
    else:
        backend, found = "duckduckgo", search_duckduckgo(data.query, ctx)
    results = dedupe(found)
    if not results:
        raise ToolFailure(ErrorCode.NOT_FOUND, f"no results for “{data.query}”; try other words.")
    return WebSearchOutput(query=data.query, backend=backend, results=results)


WEB_SEARCH_TOOL = Tool(
    name="web_search",
    annotations=READ_ONLY_WEB,  # served over /mcp
    description="Search the web; returns up to 8 results with title, URL and snippet.",
    input_model=WebSearchInput,
    output_model=WebSearchOutput,
    handler=web_search,
    result_role="web_search_tools",
    command=CommandBinding(
        name="web_search",
        usage="/web_search <query>",
        example="/web_search mars rover latest findings",
        request="What has the Mars rover found lately?",
        args_field="query",
    ),
    timeout_s=20.0,
    budget="turns",  # a direct call reaches the web
)
