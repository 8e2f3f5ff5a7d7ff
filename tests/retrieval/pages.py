"""What a reader sees of an admin page, for tests that check its words."""

from __future__ import annotations

from html.parser import HTMLParser


class _VisibleText(HTMLParser):
    """The text of a page without tags, attributes (tooltips), scripts, styles or raw JSON."""

    HIDDEN = {"script", "style", "pre"}

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.hidden = 0

    def handle_starttag(self, tag, attrs):
        self.hidden += tag in self.HIDDEN

    def handle_endtag(self, tag):
        self.hidden -= tag in self.HIDDEN

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def visible_text(page: str) -> str:
    """The page's text with runs of whitespace as one space."""
    parser = _VisibleText()
    parser.feed(page)
    return " ".join("".join(parser.parts).split())
