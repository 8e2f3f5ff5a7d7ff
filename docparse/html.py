"""HTML via lxml: headings, text blocks and GFM tables; scripts and embeds dropped, nothing fetched.

lxml's HTML parser never touches the network (no DTD or entity loading), and we never follow
src/href attributes: images contribute only their alt text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import lxml.html
from lxml import etree

from ._common import decode_text, table_from_rows
from .types import Block, Locator, ParseError, ParseResult

_SKIPPED = {
    "script",
    "style",
    "noscript",
    "template",
    "head",
    "svg",
    "math",
    "iframe",
    "object",
    "embed",
    "canvas",
    "select",
    "button",
    "audio",
    "video",
}
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_BLOCKS = {
    "html",
    "body",
    "p",
    "div",
    "li",
    "ul",
    "ol",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "nav",
    "aside",
    "blockquote",
    "pre",
    "dl",
    "dt",
    "dd",
    "figure",
    "figcaption",
    "address",
    "form",
    "fieldset",
    "details",
    "summary",
    "hr",
    "caption",
    "center",
}
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)
_SPACES = re.compile(r"\s+")
_CJK_GAP = re.compile(r"(?<=[\u3000-\u9fff\uff00-\uffef])\s+(?=[\u3000-\u9fff\uff00-\uffef])")
MAX_COLSPAN = 50


def parse_html(data: bytes, *, text_encoding: str | None) -> ParseResult:
    text = _XML_DECLARATION.sub("", decode_text(data, hint=text_encoding), count=1)
    if not text.strip():
        return ParseResult(blocks=[])
    parser = lxml.html.HTMLParser()
    try:
        root = lxml.html.document_fromstring(text, parser=parser)
    except (etree.ParserError, ValueError):
        return ParseResult(blocks=[])
    if any(error.level == etree.ErrorLevels.FATAL for error in parser.error_log):
        # libxml2 stops at its limits (nesting over 255 levels, a text node over 10 MB) and
        # silently drops the rest of the page; half a document must not pass for all of it.
        raise ParseError(
            "html_too_complex",
            "HTML 页面结构超出解析上限（嵌套超过 255 层或单段文字过长），无法完整读取。"
            "请简化页面或另存为 PDF、DOCX 后再上传。",
        )
    title_element = root.find(".//title")
    title = _normalize(title_element.text_content()) if title_element is not None else ""
    walker = _Walker()
    walker.walk(root)
    walker.flush()
    return ParseResult(blocks=walker.blocks, title=title or None)


def _normalize(text: str) -> str:
    return _CJK_GAP.sub("", _SPACES.sub(" ", text)).strip()


@dataclass
class _Walker:
    blocks: list[Block] = field(default_factory=list)
    buffer: list[str] = field(default_factory=list)
    buffer_line: int | None = None
    in_pre: int = 0

    def walk(self, element: etree._Element) -> None:
        if not isinstance(element.tag, str):  # comments and processing instructions
            self._add(element.tail, element)
            return
        tag = element.tag.lower()
        if tag in _SKIPPED:
            self._add(element.tail, element)
            return
        if tag in _HEADINGS:
            self.flush()
            text = _normalize(element.text_content())
            if text:
                self.blocks.append(
                    Block(
                        kind="text",
                        text=text,
                        heading_level=_HEADINGS[tag],
                        locator=Locator(line=element.sourceline),
                    )
                )
            self._add(element.tail, element)
            return
        if tag == "table":
            self.flush()
            self._table(element)
            self._add(element.tail, element)
            return
        if tag == "br":
            self.buffer.append("\n")
        elif tag == "img" and element.get("alt"):
            self._add(f" {element.get('alt')} ", element)
        is_block = tag in _BLOCKS
        if is_block:
            self.flush()
        self.in_pre += tag == "pre"
        self._add(element.text, element)
        for child in element:
            self.walk(child)
        self.in_pre -= tag == "pre"
        if is_block:
            self.flush()
        self._add(element.tail, element)

    def _add(self, text: str | None, element: etree._Element) -> None:
        if not text:
            return
        if self.buffer_line is None and text.strip():
            self.buffer_line = element.sourceline
        self.buffer.append(text if self.in_pre else _SPACES.sub(" ", text))

    def flush(self) -> None:
        raw = "".join(self.buffer)
        line = self.buffer_line
        self.buffer, self.buffer_line = [], None
        lines = (_CJK_GAP.sub("", part).strip() for part in raw.split("\n"))
        text = "\n".join(part for part in lines if part)
        if text:
            self.blocks.append(Block(kind="text", text=text, locator=Locator(line=line)))

    def _table(self, table: etree._Element) -> None:
        rows: list[list[str]] = []
        for row in table.xpath("./tr | ./thead/tr | ./tbody/tr | ./tfoot/tr"):
            cells: list[str] = []
            for cell in row.xpath("./th | ./td"):
                cells.extend([_normalize(cell.text_content())] * _colspan(cell))
            rows.append(cells)
        header, body = table_from_rows(rows)
        if header:
            self.blocks.append(
                Block(
                    kind="table",
                    text="\n".join((header, *body)),
                    locator=Locator(line=table.sourceline),
                    table_header=header,
                    table_rows=body,
                )
            )


def _colspan(cell: etree._Element) -> int:
    value = (cell.get("colspan") or "").strip()
    # ASCII digits only: str.isdigit() also accepts "²", which int() refuses.
    span = int(value) if value.isascii() and value.isdecimal() else 1
    return max(1, min(span, MAX_COLSPAN))
