"""Candidate units of the extractive answerer: each source cut into sentences, the rows of its
GFM tables, image captions and list items under the line that introduces them, in reading order,
with the words and bigrams each holds (`engines.providers.local`'s text features, as retrieval
reads them)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from engines.lexical import sentence_spans
from engines.providers.local import normalise, unit_features

from ..request import AnswerSource

_WORD_CHAR = re.compile(r"\w")
TABLE_SEPARATOR = re.compile(r"^\|?(?:\s*:?-+:?\s*\|)*\s*:?-+:?\s*\|?$")
_CAPTION_START = re.compile(r"^(?:\[图片\]|图片[：:]|(?:图|Figure|Fig\.?)\s*\d)", re.I)
# Quoted text that looks like our own markup is never quoted: it could pose as a citation or image.
_OUR_MARKUP = re.compile(r"citation://|asset://|\[\s*来源\s*\d+\s*\]")


@dataclass(frozen=True)
class Asset:
    id: int
    caption: str
    line: str  # verbatim, as it appeared in the context


@dataclass(frozen=True)
class Table:
    header: str
    separator: str
    rows: tuple[str, ...]


@dataclass(frozen=True)
class Unit:
    """A sentence, or one row of a GFM table, quoted verbatim from a source."""

    source: int  # the source's number: the only numbers a citation may carry
    order: int  # position of the source in the context (0 = best retrieval rank)
    position: int  # position of the unit in its source
    text: str
    features: frozenset[str]
    plain: str = ""  # the text normalised and lowercased, for spelled-out words
    table: int | None = None  # index of the source's table this row belongs to
    header: frozenset[str] = frozenset()  # a row's column names: they scope it like a title
    asks: bool = False  # the sentence is itself a question (FAQ "常见问题：…？")
    caption: bool = False  # the sentence is an image caption
    line: int = 0  # the source line it was read from
    # It introduces what follows rather than saying it: a line ending in a colon ("须满足以下
    #规则："), a numbered heading ("6.3 忘记管理员密码"), a pointer to a table ("具体天数如下表。").
    lead: bool = False


@dataclass
class SourceParts:
    source: AnswerSource
    order: int
    units: list[Unit]
    tables: list[Table]
    assets: list[Asset]
    terms: frozenset[str]  # title, units, table headers, captions: evidence "nearby" each unit
    title_terms: frozenset[str]
    caption_terms: frozenset[str]  # of the source's images: they scope it when asked about one
    plain: str  # title and text, normalised and lowercased, for presence checks


def squash(text: str) -> str:
    return "".join(text.split())


def source_parts(source: AnswerSource, order: int) -> SourceParts:
    """Units (sentences and table rows), tables and images of one source, in reading order."""
    units: list[Unit] = []
    tables: list[Table] = []
    title = squash(source.title)
    # "文档标题 > 章节 · 第 3 页": each part of the title, as a body line, is a heading, not content.
    title_parts = {squash(p) for p in re.split(r"\s+[·>]\s+", source.title) if p.strip()}
    lines = _unwrapped([line.strip() for line in source.text.splitlines()])

    def add(text: str, table: int | None = None, line: int = 0) -> None:
        if _OUR_MARKUP.search(text):
            return
        if table is None and (len(text) < 2 or not _WORD_CHAR.search(text)):
            return
        units.append(
            Unit(
                source=source.number,
                order=order,
                position=len(units),
                text=text,
                features=unit_features(text),
                plain=normalise(text).lower(),
                table=table,
                header=_header_features(tables, table),
                asks=table is None and text.rstrip("”’」』）)》\"' ").endswith(("？", "?")),
                caption=table is None and bool(_CAPTION_START.match(text)),
                line=line,
                lead=table is None and is_lead(text),
            )
        )

    assets = [Asset(image.asset_id, image.caption, image.line) for image in source.images]
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("|"):
            end = index
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            _table_units(lines[index:end], tables, add)
            index = end
            continue
        # A body line repeating the title, or one part of it, is no content.
        if line and squash(line) != title and squash(line) not in title_parts:
            for start, stop in sentence_spans(line):
                add(line[start:stop], line=index)
        index += 1
    # A sentence repeating an image's caption is a caption too.
    captions = [squash(a.caption) for a in assets]
    units = [
        replace(u, caption=True)
        if u.table is None and not u.caption and any(squash(u.text) in c for c in captions)
        else u
        for u in units
    ]
    title_terms = unit_features(source.title)
    caption_terms = frozenset().union(*(unit_features(a.caption) for a in assets))
    terms = title_terms.union(
        caption_terms, *(u.features for u in units), *(unit_features(t.header) for t in tables)
    )
    plain = normalise(f"{source.title}\n{source.text}").lower()
    return SourceParts(
        source, order, units, tables, assets, terms, title_terms, caption_terms, plain
    )


# A line ending in one of these stops mid-sentence: PDF text and hard-wrapped documents break
# lines where the page ran out, not where the sentence did.
_CONTINUES = ("、", "，", "；")
# A line ends a sentence, or introduces what follows, with one of these (or a closing quote).
_ENDS = ("。", "！", "？", "：", ":", "!", "?", ";", "…", "”", "’", "」", "』", "）", ")")
# A line starting with one of these starts an item of its own: never a wrapped line's rest.
_OWN_START = re.compile(
    r"^(?:[-*•·#>]|\d+(?:\.\d+)*[、.．)）]|[（(][一二三四五六七八九十\d]+[）)]|[一二三四五六七八九十]+[、.．]"
    r"|第[一二三四五六七八九十\d]+[章节条部分])"
)
# A number's unit on the next line ("…至11月22" / "日对…"): a cut no writer makes on purpose.
_UNIT_START = re.compile(r"^[日月年号时分秒点元个天周岁%％倍次台人]")
# A line at least this share of the source's widest line, ending in no sentence mark, ran out of
# page (PDF text keeps the page's line breaks).
_FULL_LINE = 0.85
_MIN_PAGE_WIDTH = 16


def _width(text: str) -> float:
    """Display width: a CJK or full-width character is one, anything else half."""
    return sum(1.0 if ord(ch) >= 0x2E80 else 0.5 for ch in text)


def _unwrapped(lines: list[str]) -> list[str]:
    """The lines with each sentence a page broke joined again (never a table row, an image line
    or a line starting an item of its own), so no quote ends in "、" or starts at "日对…": a line
    broken after a comma-like mark, a number cut from its unit, or a full-width line that ends
    in no sentence mark goes on in the next line."""
    page = max((_width(line) for line in lines if not line.startswith(("|", "!["))), default=0.0)
    joined: list[str] = []
    for line in lines:
        previous = joined[-1] if joined else ""
        if (
            previous and line and not line.startswith(("|", "![")) and not previous.startswith(("|", "!["))
            and not _OWN_START.match(line)
            and (
                previous.endswith(_CONTINUES)
                or previous[-1].isdigit() and _UNIT_START.match(line)
                or page >= _MIN_PAGE_WIDTH and _width(previous) >= _FULL_LINE * page
                and not previous.endswith(_ENDS) and not is_lead(previous)
            )
        ):
            joined[-1] += line
        else:
            joined.append(line)
    return joined


def _header_features(tables: list[Table], table: int | None) -> frozenset[str]:
    return unit_features(tables[table].header) if table is not None else frozenset()


def _table_units(lines: list[str], tables: list[Table], add) -> None:
    """GFM tables in a run of `|` lines: a header row, a separator row, then data rows (a run
    may hold several tables, e.g. Small2Big parents repeating the header). Rows before any
    header are plain text."""
    index = 0
    rows: list[str] | None = None
    while index < len(lines):
        line = lines[index]
        if (
            index + 1 < len(lines)
            and TABLE_SEPARATOR.match(lines[index + 1])
            and not TABLE_SEPARATOR.match(line)
        ):
            if rows is not None:
                tables[-1] = Table(tables[-1].header, tables[-1].separator, tuple(rows))
            tables.append(Table(line, lines[index + 1], ()))
            rows = []
            index += 2
            continue
        if rows is None:
            add(line)
        elif not TABLE_SEPARATOR.match(line):
            rows.append(line)
            add(line, len(tables) - 1)
        index += 1
    if rows is not None:
        tables[-1] = Table(tables[-1].header, tables[-1].separator, tuple(rows))


_HEADING = re.compile(r"^(?:第[一二三四五六七八九十\d]+[章节条部分]|\d+(?:\.\d+)+|\d+[、.．])\s*\S")
_POINTER = re.compile(r"(?:如下表|见下表|如下图|见下图|下表|如下)[。：:]?$")


def is_lead(text: str) -> bool:
    stripped = text.rstrip()
    if stripped.endswith(("：", ":")):
        return True
    if _POINTER.search(stripped):
        return True
    # A numbered heading is short and ends in no sentence mark.
    return bool(_HEADING.match(stripped)) and len(stripped) <= 30 and not stripped.endswith(("。", "；", ";", "！", "？"))
