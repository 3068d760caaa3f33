"""Reading the HTML a reply carries (a tool block's `<details>`), as a browser's parser would."""

from __future__ import annotations

from html.parser import HTMLParser


class DetailsParser(HTMLParser):
    """Every start tag of a piece of HTML, with its attributes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
