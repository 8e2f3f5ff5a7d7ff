"""Turn a `ParseResult` into Parent / Child chunk drafts.

- A section runs from one heading to the next; it is a Parent with a stable `parent_id`.
  Callers that expand hits to whole Parents may cap their size with `max_parent_tokens`: a
  longer section is then cut into consecutive Parents (off by default: one Parent per section).
- Children hold about `chunk_tokens` Qwen tokens of one Parent. Text is cut between sentences
  (Chinese and English), and only cut inside a sentence when that one sentence is over budget.
  Each text child starts with up to `overlap_tokens` of the previous child's last sentences.
- Tables are cut between rows, with the GFM header repeated in every table chunk.
- Images become chunks of their own, with a placeholder text built from OCR / nearby text.

Output depends only on the `ParseResult` and the arguments, so identical bytes give identical
chunks and parent ids on every run.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from docparse.types import Block, Locator, ParsedImage, ParseResult
from engines.tokens import count_tokens

_SENTENCE_END = re.compile(r"(?:[。！？；!?;]+|…+|\.(?=\s|$))[”’\"'」』）)\]】]*\s*")
_LINE_END = re.compile(r"\n+")
# Pieces this short ("1. ", "（一）") belong to the sentence that follows them.
MIN_PIECE_CHARS = 4
IMAGE_CAPTION_CHARS = 300
_CELL_RANGE = re.compile(r"^([A-Z]+)(\d+)(?::([A-Z]+)(\d+))?$")


@dataclass(frozen=True)
class ChunkDraft:
    ordinal: int
    parent_id: str
    heading_path: tuple[str, ...]
    locator: dict
    bboxes: list[list[float]]
    content_type: str  # "text" | "table" | "image"
    content: str
    token_count: int
    image_keys: tuple[str, ...]


def chunk_document(
    result: ParseResult,
    *,
    document_key: str,
    chunk_tokens: int = 512,
    overlap_tokens: int = 48,
    max_parent_tokens: int | None = None,
) -> list[ChunkDraft]:
    if chunk_tokens <= 0:
        raise ValueError("chunk_tokens must be positive")
    overlap_tokens = max(0, min(overlap_tokens, chunk_tokens // 2))
    chunker = _Chunker(
        document_key=document_key,
        budget=chunk_tokens,
        overlap=overlap_tokens,
        max_parent=max_parent_tokens or 0,
        images={image.key: image for image in result.images},
    )
    for section in _sections(result.blocks):
        chunker.add_section(section)
    return chunker.drafts


# --- Sections ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Section:
    ordinal: int
    heading_path: tuple[str, ...]
    # Heading blocks whose text opens the section's first text chunk: its own heading plus
    # headings of empty sections right before it, so no heading text is lost.
    headings: tuple[Block, ...]
    blocks: tuple[Block, ...]


def _sections(blocks: Iterable[Block]) -> list[_Section]:
    sections: list[_Section] = []
    stack: list[tuple[int, str]] = []
    path: tuple[str, ...] = ()
    headings: list[Block] = []
    body: list[Block] = []
    ordinal = 0

    def close() -> None:
        nonlocal ordinal
        if body:
            sections.append(_Section(ordinal, path, tuple(headings), tuple(body)))
            headings.clear()
            body.clear()
        ordinal += 1

    for block in blocks:
        if block.kind == "text" and block.heading_level > 0 and block.text.strip():
            close()
            while stack and stack[-1][0] >= block.heading_level:
                stack.pop()
            stack.append((block.heading_level, _one_line(block.text)))
            path = tuple(text for _, text in stack)
            headings.append(block)
        elif block.text.strip() or block.image_keys or block.table_rows or block.table_header:
            body.append(block)
    close()
    if headings:
        # Trailing headings with nothing under them still carry text worth finding.
        sections.append(_Section(ordinal, path, tuple(headings), ()))
    return sections


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- Pieces of text ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Piece:
    text: str
    tokens: int
    source: Block
    # Separator before this piece when it follows another one: "" inside a block, "\n" between.
    joiner: str
    heading: bool = False


def _pieces(block: Block, budget: int, *, heading: bool = False) -> list[_Piece]:
    parts: list[tuple[str, int]] = []
    for sentence in _merge_short(_split(block.text.strip(), _SENTENCE_END)):
        for part, tokens in _fit(sentence, budget):
            if parts and not part.strip():
                # Whitespace alone (a blank line, a cut inside a run of spaces) would become an
                # empty chunk when a cut fell right after it: it stays with the text before it.
                previous, previous_tokens = parts[-1]
                parts[-1] = (previous + part, previous_tokens + tokens)
            else:
                parts.append((part, tokens))
    # The newline joining a block to the previous one costs a token too.
    return [
        _Piece(
            text=part,
            tokens=tokens + (1 if index == 0 else 0),
            source=block,
            joiner="\n" if index == 0 else "",
            heading=heading,
        )
        for index, (part, tokens) in enumerate(parts)
    ]


def _split(text: str, boundary: re.Pattern[str]) -> list[str]:
    """Cut after each boundary match; the parts concatenate back to `text` exactly."""
    parts: list[str] = []
    start = 0
    for match in boundary.finditer(text):
        if match.end() > start:
            parts.append(text[start : match.end()])
            start = match.end()
    if start < len(text):
        parts.append(text[start:])
    return [part for part in parts if part]


def _merge_short(parts: list[str]) -> list[str]:
    merged: list[str] = []
    carry = ""
    for part in parts:
        if len((carry + part).strip()) <= MIN_PIECE_CHARS:
            carry += part
            continue
        merged.append(carry + part)
        carry = ""
    if carry:
        if merged:
            merged[-1] += carry
        else:
            merged.append(carry)
    return merged


def _fit(sentence: str, budget: int) -> list[tuple[str, int]]:
    """A sentence within budget stays whole; a longer one is cut at line breaks, then by tokens.
    Each part comes with its token count, so no text is tokenized twice."""
    tokens = count_tokens(sentence)
    if tokens <= budget:
        return [(sentence, tokens)]
    out: list[tuple[str, int]] = []
    for line in _split(sentence, _LINE_END):
        tokens = count_tokens(line)
        if tokens <= budget:
            out.append((line, tokens))
        else:
            out.extend((part, count_tokens(part)) for part in _split_by_tokens(line, budget))
    return out


def _split_by_tokens(text: str, budget: int) -> list[str]:
    """Longest prefixes within budget, found by binary search on characters so a cut never
    lands inside a multi-byte character (token slices could).

    The search window starts at two characters per token and doubles until it is over budget,
    so each cut tokenizes only text near the cut, never the whole remainder: linear in the
    length of the text instead of quadratic."""
    out: list[str] = []
    while text:
        fits, probe = 0, min(len(text), 2 * budget)  # prefix lengths
        while count_tokens(text[:probe]) <= budget:
            if probe == len(text):
                out.append(text)
                return out
            fits, probe = probe, min(len(text), 2 * probe)
        # text[:fits] is within budget, text[:probe] is not.
        low, high = max(fits, 1), probe - 1
        while low < high:
            middle = (low + high + 1) // 2
            if count_tokens(text[:middle]) <= budget:
                low = middle
            else:
                high = middle - 1
        out.append(text[:low])
        text = text[low:]
    return out


def _render(pieces: Sequence[_Piece]) -> str:
    out = ""
    for index, piece in enumerate(pieces):
        out += (piece.joiner if index else "") + piece.text
    return out.strip()


# --- Chunker ----------------------------------------------------------------------------------


@dataclass
class _Chunker:
    document_key: str
    budget: int
    overlap: int
    max_parent: int
    images: dict[str, ParsedImage]
    drafts: list[ChunkDraft] = field(default_factory=list)
    # State of the section being chunked.
    section: _Section | None = None
    part: int = 0
    part_tokens: int = 0
    own: list[_Piece] = field(default_factory=list)
    carried: list[_Piece] = field(default_factory=list)
    pending_images: list[Block] = field(default_factory=list)
    orphan_headings: bool = False
    # The section's latest text chunk, which a small remainder may still join.
    last_text_draft: int | None = None
    last_text_pieces: list[_Piece] = field(default_factory=list)
    last_text_sources: list[Block] = field(default_factory=list)
    last_text_carried: int = 0

    # -- sections --

    def add_section(self, section: _Section) -> None:
        self.section = section
        self.part, self.part_tokens = 0, 0
        self.own, self.carried, self.pending_images = [], [], []
        self.last_text_draft, self.last_text_pieces, self.last_text_sources = None, [], []
        # Headings of empty sections before this one that are not on its heading path: dropping
        # them with the section's own headings (when it has no text) would lose their text.
        self.orphan_headings = any(
            _one_line(heading.text) not in section.heading_path for heading in section.headings
        )
        for heading in section.headings:
            for piece in _pieces(heading, self.budget, heading=True):
                self._add_piece(piece)
        for block in section.blocks:
            if block.kind == "table":
                self._flush_text(final=True, keep_headings=self.orphan_headings)
                self._emit_images()
                self._table(block)
            elif block.kind == "image":
                self.pending_images.append(block)
                if not self._has_body():
                    self._emit_images()
            else:
                for piece in _pieces(block, self.budget):
                    self._add_piece(piece)
        self._flush_text(final=True, keep_headings=not section.blocks or self.orphan_headings)
        self._emit_images()

    def _has_body(self) -> bool:
        return any(not piece.heading for piece in self.own)

    # -- text --

    def _add_piece(self, piece: _Piece) -> None:
        used = sum(p.tokens for p in self.carried) + sum(p.tokens for p in self.own)
        if self.own and used + piece.tokens > self.budget:
            # Headings count towards the budget as well: when they leave no room for the next
            # piece they become a chunk of their own (they are on every chunk's heading path).
            self._flush_text(final=False, keep_headings=True)
            self._emit_images()
        if self.carried and sum(p.tokens for p in self.carried) + piece.tokens > self.budget:
            self.carried = []
        self.own.append(piece)

    def _flush_text(self, *, final: bool, keep_headings: bool = False) -> None:
        if not self._has_body() and not (keep_headings and self.own):
            if final:
                # Headings alone are already on every chunk as heading_path.
                self.own, self.carried = [], []
            return
        own_tokens = sum(p.tokens for p in self.own)
        if final and self._merge_into_previous(own_tokens):
            self.own, self.carried = [], []
            return
        pieces = self.carried + self.own
        sources = _unique(p.source for p in self.own)
        index = self._emit(
            content_type="text",
            content=_render(pieces),
            sources=sources,
            own_tokens=own_tokens,
            line_ends=True,
        )
        self.last_text_draft, self.last_text_pieces, self.last_text_sources = index, pieces, sources
        self.last_text_carried = len(self.carried)
        self.carried = [] if final else _tail(self.own, self.overlap)
        self.own = []

    def _merge_into_previous(self, own_tokens: int) -> bool:
        """A small remainder joins the previous text chunk of the section if the result fits the
        budget, giving up that chunk's overlap if needed: one whole chunk beats a fragment."""
        if self.last_text_draft is None or self.last_text_draft != len(self.drafts) - 1:
            return False
        if own_tokens > self.budget // 4:
            return False
        candidates = (self.last_text_pieces, self.last_text_pieces[self.last_text_carried :])
        previous_pieces = next(
            (c for c in candidates if sum(p.tokens for p in c) + own_tokens <= self.budget), None
        )
        if previous_pieces is None:
            return False
        previous = self.drafts[self.last_text_draft]
        pieces = previous_pieces + self.own
        sources = _unique([*self.last_text_sources, *(p.source for p in self.own)])
        content = _render(pieces)
        self.drafts[self.last_text_draft] = replace(
            previous,
            locator=_locator(sources, line_ends=True),
            bboxes=_bboxes(sources),
            content=content,
            token_count=count_tokens(content),
        )
        self.part_tokens += own_tokens
        if previous_pieces is not self.last_text_pieces:
            self.last_text_carried = 0
        self.last_text_pieces, self.last_text_sources = pieces, sources
        return True

    # -- tables --

    def _table(self, block: Block) -> None:
        header = block.table_header.strip()
        rows = list(block.table_rows) or (
            [] if header else [line for line in block.text.splitlines() if line.strip()]
        )
        locators = (
            list(block.row_locators) if len(block.row_locators) == len(block.table_rows) else []
        )
        header_tokens = count_tokens(header) + 1 if header else 0
        if not rows:
            self._emit_table(header, [], block, [])
            return
        room = max(self.budget - header_tokens, 1)
        batch: list[str] = []
        batch_locators: list[Locator] = []
        batch_tokens = 0
        for index, row in enumerate(rows):
            row_tokens = count_tokens(row) + 1
            if batch and batch_tokens + row_tokens > room:
                self._emit_table(header, batch, block, batch_locators)
                batch, batch_locators, batch_tokens = [], [], 0
            row_locator = [locators[index]] if locators else []
            if row_tokens > room:
                # One row over budget on its own: the only case a row is cut, header on each part.
                for part in _split_by_tokens(row, room):
                    self._emit_table(header, [part], block, row_locator)
                continue
            batch.append(row)
            batch_locators.extend(row_locator)
            batch_tokens += row_tokens
        if batch:
            self._emit_table(header, batch, block, batch_locators)

    def _emit_table(
        self, header: str, rows: list[str], block: Block, row_locators: list[Locator]
    ) -> None:
        content = "\n".join([header, *rows] if header else rows)
        locator = (
            _locator_from(row_locators) if row_locators else _locator([block], line_ends=False)
        )
        self._emit(
            content_type="table",
            content=content,
            sources=[block],
            locator=locator,
        )

    # -- images --

    def _emit_images(self) -> None:
        for block in self.pending_images:
            content = self._image_content(block)
            self._emit(
                content_type="image",
                content=content,
                sources=[block],
                image_keys=block.image_keys,
            )
        self.pending_images = []

    def _image_content(self, block: Block) -> str:
        captions: list[str] = []
        for key in block.image_keys:
            image = self.images.get(key)
            text = (image.ocr_text or image.nearby_text) if image else ""
            text = _one_line(text or block.text)[:IMAGE_CAPTION_CHARS]
            if not text and self.section and self.section.heading_path:
                text = self.section.heading_path[-1]
            captions.append(f"[图片] {text}".strip())
        return "\n".join(captions) or "[图片]"

    # -- drafts --

    def _emit(
        self,
        *,
        content_type: str,
        content: str,
        sources: list[Block],
        own_tokens: int | None = None,
        locator: dict | None = None,
        line_ends: bool = False,
        image_keys: tuple[str, ...] = (),
    ) -> int:
        """Append a chunk; `own_tokens` (what counts towards the Parent's size, i.e. without the
        overlap carried from the previous chunk) defaults to the content's token count."""
        assert self.section is not None
        token_count = count_tokens(content)
        if own_tokens is None:
            own_tokens = token_count
        if self.max_parent and self.part_tokens and self.part_tokens + own_tokens > self.max_parent:
            self.part += 1
            self.part_tokens = 0
            self.last_text_draft = None
        self.part_tokens += own_tokens
        self.drafts.append(
            ChunkDraft(
                ordinal=len(self.drafts),
                parent_id=_parent_id(self.document_key, self.section, self.part),
                heading_path=self.section.heading_path,
                locator=locator if locator is not None else _locator(sources, line_ends=line_ends),
                bboxes=_bboxes(sources),
                content_type=content_type,
                content=content,
                token_count=token_count,
                image_keys=tuple(image_keys),
            )
        )
        return len(self.drafts) - 1


def _tail(pieces: list[_Piece], limit: int) -> list[_Piece]:
    """Trailing whole sentences of the previous chunk, at most `limit` tokens, as overlap."""
    tail: list[_Piece] = []
    total = 0
    for piece in reversed(pieces):
        if piece.heading or total + piece.tokens > limit:
            break
        tail.insert(0, piece)
        total += piece.tokens
    return tail


def _parent_id(document_key: str, section: _Section, part: int) -> str:
    key = "\x1f".join([document_key, str(section.ordinal), str(part), *section.heading_path])
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:16]


# --- Locators ---------------------------------------------------------------------------------


def _locator(blocks: Sequence[Block], *, line_ends: bool) -> dict:
    locators = [block.locator for block in blocks]
    out = _locator_from(locators)
    lines = [
        (block.locator.line, block.locator.line + (block.text.count("\n") if line_ends else 0))
        for block in blocks
        if block.locator.line is not None
    ]
    if lines:
        out["line_start"] = min(start for start, _ in lines)
        out["line_end"] = max(end for _, end in lines)
    return out


def _locator_from(locators: Sequence[Locator]) -> dict:
    """Union of locators: page range, slide range, sheet + cell range, line range."""
    out: dict = {}
    pages = [loc.page for loc in locators if loc.page is not None]
    if pages:
        out["page_start"], out["page_end"] = min(pages), max(pages)
    slides = [loc.slide for loc in locators if loc.slide is not None]
    if slides:
        out["slide"] = min(slides)
        if max(slides) != min(slides):
            out["slide_end"] = max(slides)
    sheet = next((loc.sheet for loc in locators if loc.sheet), None)
    if sheet:
        out["sheet"] = sheet
    cell_range = _union_ranges([loc.cell_range for loc in locators if loc.cell_range])
    if cell_range:
        out["range"] = cell_range
    lines = [loc.line for loc in locators if loc.line is not None]
    if lines:
        out["line_start"], out["line_end"] = min(lines), max(lines)
    return out


def _union_ranges(ranges: Sequence[str]) -> str | None:
    cols: list[int] = []
    rows: list[int] = []
    for value in ranges:
        match = _CELL_RANGE.match(value.replace("$", "").upper())
        if not match:
            continue
        first_col, first_row, last_col, last_row = match.groups()
        cols += [_col_number(first_col), _col_number(last_col or first_col)]
        rows += [int(first_row), int(last_row or first_row)]
    if not cols:
        return None
    return f"{_col_letters(min(cols))}{min(rows)}:{_col_letters(max(cols))}{max(rows)}"


def _col_number(letters: str) -> int:
    number = 0
    for letter in letters:
        number = number * 26 + ord(letter) - 64
    return number


def _col_letters(number: int) -> str:
    letters = ""
    while number:
        number, remainder = divmod(number - 1, 26)
        letters = chr(65 + remainder) + letters
    return letters


def _bboxes(blocks: Sequence[Block]) -> list[list[float]]:
    seen: list[list[float]] = []
    for block in blocks:
        for bbox in block.bboxes:
            value = bbox.as_list()
            if value not in seen:
                seen.append(value)
    return seen


def _unique(blocks: Iterable[Block]) -> list[Block]:
    """Blocks in first-seen order, once each (by identity: equal blocks may repeat legitimately)."""
    seen: set[int] = set()
    out: list[Block] = []
    for block in blocks:
        if id(block) not in seen:
            seen.add(id(block))
            out.append(block)
    return out
