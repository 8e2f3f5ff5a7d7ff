"""Markdown: ATX and setext headings, paragraphs, GFM tables, fenced code; images are never
fetched (their alt text stays). Line-based, so every block knows its first source line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ._common import decode_text, gfm_header, gfm_row, normalize_newlines
from .types import Block, Locator, ParseResult

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_THEMATIC_BREAK = re.compile(r"^ {0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$")
_TABLE_DELIMITER = re.compile(r"^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$")
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)|!\[([^\]]*)\]\[[^\]]*\]")
_HTML_IMG = re.compile(r"<img\b[^>]*>", re.IGNORECASE)
_ALT = re.compile(r"\balt\s*=\s*[\"']([^\"']*)[\"']", re.IGNORECASE)


def parse_markdown(data: bytes, *, text_encoding: str | None) -> ParseResult:
    lines = normalize_newlines(decode_text(data, hint=text_encoding)).split("\n")
    parser = _Parser(lines)
    parser.run()
    title = next((block.text for block in parser.blocks if block.heading_level == 1), None)
    return ParseResult(blocks=parser.blocks, title=title)


def strip_images(text: str) -> str:
    """Images become their alt text: remote images are never fetched."""
    text = _IMAGE.sub(lambda match: match.group(1) or match.group(2) or "", text)
    return _HTML_IMG.sub(_alt_text, text)


def _alt_text(match: re.Match[str]) -> str:
    alt = _ALT.search(match.group(0))
    return alt.group(1) if alt else ""


@dataclass
class _Parser:
    lines: list[str]
    blocks: list[Block] = field(default_factory=list)
    paragraph: list[tuple[int, str]] = field(default_factory=list)
    index: int = 0

    def run(self) -> None:
        self._skip_front_matter()
        while self.index < len(self.lines):
            line = self.lines[self.index]
            if _FENCE.match(line):
                self._fenced_code()
            elif _ATX.match(line):
                self._flush()
                self._atx(line)
            elif self.paragraph and _SETEXT.match(line) and not self._is_list_or_quote():
                self._setext(line)
            elif not line.strip() or _THEMATIC_BREAK.match(line):
                self._flush()
            elif self._table_starts():
                self._flush()
                self._table()
                continue
            else:
                self.paragraph.append((self.index + 1, line))
            self.index += 1
        self._flush()

    def _skip_front_matter(self) -> None:
        if not self.lines or self.lines[0].strip() != "---":
            return
        for index in range(1, min(len(self.lines), 200)):
            if self.lines[index].strip() in ("---", "..."):
                self.index = index + 1
                return

    def _flush(self) -> None:
        if not self.paragraph:
            return
        text = strip_images("\n".join(line.rstrip() for _, line in self.paragraph)).strip()
        if text:
            self.blocks.append(
                Block(kind="text", text=text, locator=Locator(line=self.paragraph[0][0]))
            )
        self.paragraph = []

    def _is_list_or_quote(self) -> bool:
        first = self.paragraph[0][1].lstrip()
        return first.startswith((">", "- ", "* ", "+ "))

    def _atx(self, line: str) -> None:
        match = _ATX.match(line)
        assert match is not None
        text = strip_images((match.group(2) or "").strip())
        if text:
            self.blocks.append(
                Block(
                    kind="text",
                    text=text,
                    heading_level=len(match.group(1)),
                    locator=Locator(line=self.index + 1),
                )
            )

    def _setext(self, line: str) -> None:
        level = 1 if line.strip().startswith("=") else 2
        first_line = self.paragraph[0][0]
        text = strip_images(" ".join(part.strip() for _, part in self.paragraph)).strip()
        self.paragraph = []
        if text:
            self.blocks.append(
                Block(kind="text", text=text, heading_level=level, locator=Locator(line=first_line))
            )

    def _fenced_code(self) -> None:
        self._flush()
        opening = _FENCE.match(self.lines[self.index])
        assert opening is not None
        marker = opening.group(1)
        start = self.index
        self.index += 1
        while self.index < len(self.lines):
            stripped = self.lines[self.index].strip()
            if stripped.startswith(marker[0] * len(marker)) and not stripped.strip(marker[0]):
                break
            self.index += 1
        # Kept verbatim, fences included, so code reads as code in citations.
        text = "\n".join(self.lines[start : self.index + 1]).strip()
        if text:
            self.blocks.append(Block(kind="text", text=text, locator=Locator(line=start + 1)))

    def _table_starts(self) -> bool:
        line = self.lines[self.index]
        following = self.lines[self.index + 1] if self.index + 1 < len(self.lines) else ""
        return "|" in line and bool(_TABLE_DELIMITER.match(following)) and "-" in following

    def _table(self) -> None:
        header_cells = _cells(self.lines[self.index])
        start = self.index
        self.index += 2
        body: list[list[str]] = []
        locators: list[Locator] = []
        while self.index < len(self.lines):
            line = self.lines[self.index]
            if not line.strip() or "|" not in line:
                break
            cells = _cells(line)
            if any(cells):
                body.append(cells)
                locators.append(Locator(line=self.index + 1))
            self.index += 1
        header = gfm_header(header_cells, max([len(header_cells), *(len(cells) for cells in body)]))
        rows = [gfm_row(cells) for cells in body]
        self.blocks.append(
            Block(
                kind="table",
                text="\n".join((header, *rows)),
                locator=Locator(line=start + 1),
                table_header=header,
                table_rows=tuple(rows),
                row_locators=tuple(locators),
            )
        )


def _cells(line: str) -> list[str]:
    text = line.strip()
    if text.startswith("|"):
        text = text[1:]
    if text.endswith("|") and not text.endswith("\\|"):
        text = text[:-1]
    return [strip_images(cell.strip()) for cell in _UNESCAPED_PIPE.split(text)]
