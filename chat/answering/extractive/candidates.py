"""Candidate units of the extractive answerer: each source cut into sentences, the rows of its
GFM tables, image captions and list items under the line that introduces them, in reading order,
with the words and bigrams each holds (`engines.providers.local`'s text features, as retrieval
reads them)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from engines.lexical import sentence_spans, unwrap_lines
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
    lines = unwrap_lines([line.strip() for line in source.text.splitlines()])

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
