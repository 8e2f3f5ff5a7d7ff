"""Plain text: paragraphs split on blank lines, numbered heading lines ("第一章 …", "一、…",
"1.2 …") become headings. Block text keeps its line breaks so line locators stay exact."""

from __future__ import annotations

from ._common import (
    HeadingLevels,
    HeadingMatch,
    decode_text,
    match_numbered_heading,
    normalize_newlines,
)
from .types import Block, Locator, ParseResult


def parse_text(data: bytes, *, text_encoding: str | None) -> ParseResult:
    lines = normalize_newlines(decode_text(data, hint=text_encoding)).split("\n")
    levels = HeadingLevels()
    blocks: list[Block] = []
    paragraph: list[tuple[int, str]] = []

    def flush() -> None:
        text = "\n".join(line.rstrip() for _, line in paragraph).strip("\n")
        if text.strip():
            blocks.append(Block(kind="text", text=text, locator=Locator(line=paragraph[0][0])))
        paragraph.clear()

    for index, line in enumerate(lines):
        if not line.strip():
            flush()
            continue
        match = match_numbered_heading(line)
        if match and _is_heading(lines, index, match):
            flush()
            blocks.append(
                Block(
                    kind="text",
                    text=line.strip(),
                    heading_level=levels.level(match.kind),
                    locator=Locator(line=index + 1),
                )
            )
            continue
        paragraph.append((index + 1, line))
    flush()
    return ParseResult(blocks=blocks)


def _is_heading(lines: list[str], index: int, match: HeadingMatch) -> bool:
    previous = lines[index - 1] if index > 0 else ""
    following = lines[index + 1] if index + 1 < len(lines) else ""
    if not match.strong:
        # "1. …" is as often a list item as a heading: only a line standing alone counts.
        return not previous.strip() and not following.strip()
    # Adjacent lines numbered the same way ("一、…" right under "一、…") are a list.
    for neighbour in (previous, following):
        other = match_numbered_heading(neighbour) if neighbour.strip() else None
        if other is not None and other.kind == match.kind:
            return False
    return True
