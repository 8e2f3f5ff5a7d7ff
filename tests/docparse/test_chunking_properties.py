"""Property tests for the chunker, alone and behind the text parsers, on hostile text.

What `chunk_document` guarantees, made exact:
- No text is lost or invented: with no overlap, the visible (non-whitespace) characters of the
  text chunks are those of the text blocks, in order. With overlap, each text chunk is some tail
  of the previous one followed by new text, and together they still spell the blocks exactly.
  Whitespace is the only normalisation: chunks are stripped and cut between pieces.
- Every table row is in a table chunk of its table, in order, the header on each chunk; every
  image is in exactly one image chunk.
- Text chunks hold at most `chunk_tokens` tokens, headings included, up to what the tokenizer
  merges across the cuts between pieces (`TOKENIZER_SLACK`).
- Line locators stay inside the source and cover every line that has text.
"""

from __future__ import annotations

import csv
import io
import operator

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engines.tokens import count_tokens
from docparse.chunking import ChunkDraft, chunk_document
from docparse import ParseLimits, parse_document
from docparse.types import Block, ParsedImage, ParseError, ParseResult

settings.register_profile(
    "chunking_properties",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PROFILE = settings.get_profile("chunking_properties")
TOKENIZER_SLACK = 2

# --- Text -------------------------------------------------------------------------------------

CJK = st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF)
ASCII = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
EMOJI = st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF)
CONTROL = st.characters(max_codepoint=0x1F) | st.sampled_from(
    ["\x7f", "\x85", "\u2028", "\u200b", "\ufeff", "\u3000", "\xa0", "\u202e"]
)
PUNCTUATION = st.sampled_from(list("。！？；…，、.!?;:\"'」』）)]】 \n\t\r"))
ANY = st.characters(exclude_categories=("Cs",))
CHARACTERS = st.one_of(CJK, ASCII, EMOJI, CONTROL, PUNCTUATION, ANY)
# Long lines without a space or a sentence end, which only a cut by tokens can split.
RUNS = st.builds(
    operator.mul, st.sampled_from(["a", "中", "😀", "ab1", "-", "|", "é"]), st.integers(40, 400)
)
MARKUP = st.sampled_from(
    [
        "# ",
        "## 标题\n",
        "标题\n===\n",
        "| a | b |\n| --- | --- |\n| 1 | 2 |\n",
        "|x|\n|-|\n",
        "```\ncode\n",
        "---\n",
        "> 引用",
        "- 列表项\n",
        "![图](http://x/y.png)",
        "<p>段落</p>",
        "<h2>小节</h2>",
        "<table><tr><td>格</td></tr></table>",
        "<br>",
        "&amp;&#20013;",
        "第一章 总则\n",
        "1.2 范围\n",
        "一、目的\n",
        "（一）说明\n",
        "\n\n",
    ]
)
FRAGMENTS = st.one_of(st.text(CHARACTERS, max_size=30), RUNS, MARKUP)
TEXTS = st.lists(FRAGMENTS, max_size=10).map("".join)
BUDGETS = st.integers(min_value=8, max_value=96)
OVERLAPS = st.integers(min_value=0, max_value=48)


def visible(text: str) -> str:
    return "".join(text.split())


def text_chunks(drafts: list[ChunkDraft]) -> list[ChunkDraft]:
    return [draft for draft in drafts if draft.content_type == "text"]


def spells(source: str, chunks: list[str]) -> bool:
    """Whether the chunks, each a tail of the previous one followed by new text, spell `source`
    exactly. Searched over every possible overlap, so repeated text cannot fool it: the state is
    where the last chunk may end, with the earliest place it may have started."""
    if not chunks:
        return source == ""
    if not source.startswith(chunks[0]):
        return False
    ends = {len(chunks[0]): 0}  # end of the last chunk -> earliest start
    for chunk in chunks[1:]:
        following: dict[int, int] = {}
        for end, start in ends.items():
            # The chunk starts inside the previous one (its overlap) and must bring new text.
            at = source.find(chunk, start, end + len(chunk))
            while at != -1 and at <= end:
                if at + len(chunk) > end:
                    following[at + len(chunk)] = min(following.get(at + len(chunk), at), at)
                at = source.find(chunk, at + 1, end + len(chunk))
        if not following:
            return False
        ends = following
    return len(source) in ends


def test_spells_accepts_overlap_and_refuses_loss_reordering_and_repeats():
    # given
    source = "abcdefgh"

    # then
    assert spells(source, ["abcd", "cdefgh"])
    assert spells(source, ["abcd", "efgh"])
    assert spells("aaaaaa", ["aaaa", "aaaa"])
    assert not spells(source, ["abcd", "fgh"])  # "e" lost
    assert not spells(source, ["abcd", "abcd", "efgh"])  # a chunk with nothing new
    assert not spells(source, ["efgh", "abcd"])
    assert not spells(source, ["abcd", "cdef"])  # the end lost
    assert not spells(source, ["abcd", "xefgh"])


def assert_well_formed(drafts: list[ChunkDraft], budget: int) -> None:
    assert [draft.ordinal for draft in drafts] == list(range(len(drafts)))
    for draft in drafts:
        assert draft.content.strip(), draft
        assert draft.token_count == count_tokens(draft.content)
        if draft.content_type == "text":
            assert draft.content == draft.content.strip()
            # The budget holds for the pieces' own token counts; joined, the tokenizer may merge
            # across a cut ("…000 " + "茁" is 7 + 1 tokens, "…000 茁" is 9), hence the slack.
            assert draft.token_count <= budget + TOKENIZER_SLACK, (draft.token_count, budget)
    # A Parent's children are contiguous.
    parents = [draft.parent_id for draft in drafts]
    assert parents == sorted(parents, key=parents.index)


# --- Chunker on blocks ------------------------------------------------------------------------

LEVELS = st.sampled_from([0, 0, 0, 1, 2, 3, 6])
TEXT_BLOCKS = st.lists(
    st.builds(lambda level, text: Block(kind="text", text=text, heading_level=level), LEVELS, TEXTS),
    max_size=8,
)


@settings(PROFILE, max_examples=80)
@given(
    blocks=TEXT_BLOCKS,
    budget=BUDGETS,
    overlap=OVERLAPS,
    max_parent=st.none() | st.integers(min_value=8, max_value=300),
)
# Found here: headings were outside the budget (a 60-token heading made a 60-token chunk).
@example(
    blocks=[Block(kind="text", text="0" * 60, heading_level=1)], budget=8, overlap=0, max_parent=None
)
def test_text_chunks_spell_the_blocks_exactly_within_the_budget(blocks, budget, overlap, max_parent):
    # when
    drafts = chunk_document(
        ParseResult(blocks=blocks),
        document_key="doc",
        chunk_tokens=budget,
        overlap_tokens=overlap,
        max_parent_tokens=max_parent,
    )

    # then
    assert_well_formed(drafts, budget)
    source = visible("".join(block.text for block in blocks))
    chunks = [visible(draft.content) for draft in drafts]
    if overlap == 0:
        assert "".join(chunks) == source
    assert spells(source, chunks)


TABLE_CELLS = st.text(st.one_of(CJK, ASCII, EMOJI, st.sampled_from("\\|")), max_size=12)


@st.composite
def tables(draw) -> Block:
    width = draw(st.integers(min_value=1, max_value=4))
    header = "| " + " | ".join(draw(TABLE_CELLS) for _ in range(width)) + " |"
    header += "\n| " + " | ".join(["---"] * width) + " |"
    rows = draw(
        st.lists(
            st.lists(TABLE_CELLS | RUNS, min_size=width, max_size=width).map(
                lambda cells: "| " + " | ".join(cells) + " |"
            ),
            max_size=8,
        )
    )
    return Block(kind="table", text="", table_header=header, table_rows=tuple(rows))




@st.composite
def images(draw) -> Block:
    return Block(
        kind="image",
        text=draw(TEXTS),
        image_keys=(f"img-{draw(st.integers(0, 10**6)):07d}",),
    )


MIXED_BLOCKS = st.lists(
    st.one_of(
        st.builds(lambda level, text: Block(kind="text", text=text, heading_level=level), LEVELS, TEXTS),
        tables(),
        images(),
    ),
    max_size=8,
)


def is_subsequence(needle: str, haystack: str) -> bool:
    characters = iter(haystack)
    return all(character in characters for character in needle)


@settings(PROFILE, max_examples=60)
@given(blocks=MIXED_BLOCKS, budget=BUDGETS, overlap=OVERLAPS)
@example(
    blocks=[
        Block(kind="text", text="A", heading_level=1),
        Block(kind="text", text="B", heading_level=1),
        Block(kind="table", text="", table_header="| a |\n| --- |", table_rows=("| 1 |",)),
    ],
    budget=64,
    overlap=0,
)
def test_no_heading_body_row_or_image_is_lost_among_tables_and_images(blocks, budget, overlap):
    # given: image keys are unique within a parse result
    blocks = [
        Block(kind="image", text=block.text, image_keys=(f"img-{index}",))
        if block.kind == "image"
        else block
        for index, block in enumerate(blocks)
    ]

    # when
    drafts = chunk_document(
        ParseResult(blocks=blocks), document_key="doc", chunk_tokens=budget, overlap_tokens=overlap
    )

    # then
    assert_well_formed(drafts, budget)
    texts = "".join(visible(draft.content) for draft in text_chunks(drafts))
    body = "".join(
        visible(block.text) for block in blocks if block.kind == "text" and not block.heading_level
    )
    assert is_subsequence(body, texts)
    # A heading's text is in a chunk, or on the heading path of the chunks under it.
    on_paths = {visible(heading) for draft in drafts for heading in draft.heading_path}
    for block in blocks:
        if block.kind == "text" and block.heading_level and block.text.strip():
            assert visible(block.text) in on_paths or visible(block.text) in texts, block.text
    # Tables: rows in order, cut only when one row is over budget, the header on every chunk.
    tables_ = [block for block in blocks if block.kind == "table"]
    table_drafts = [draft for draft in drafts if draft.content_type == "table"]
    header_lines = [block.table_header.strip() for block in tables_]
    rows = "".join(visible(row) for block in tables_ for row in block.table_rows)
    chunk_rows = ""
    for draft in table_drafts:
        header = next(header for header in header_lines if draft.content.startswith(header))
        chunk_rows += visible(draft.content.removeprefix(header))
    assert chunk_rows == rows
    # Images: one chunk each, in order.
    image_keys = [key for block in blocks if block.kind == "image" for key in block.image_keys]
    assert [key for draft in drafts for key in draft.image_keys] == image_keys


# --- Behind the text parsers ------------------------------------------------------------------

LIMITS = ParseLimits(ocr_enabled=False)
ENCODINGS = st.sampled_from(["utf-8", "gb18030"])


def parse(data: bytes, file_type: str, encoding: str | None) -> ParseResult | None:
    try:
        return parse_document(
            data, file_type=file_type, filename=f"doc.{file_type}", limits=LIMITS,
            text_encoding=encoding,
        )
    except ParseError as exc:
        assert exc.code in {"empty_file", "no_text", "html_too_complex", "csv_invalid"}, exc.code
        return None


def encoded(text: str, encoding: str) -> bytes:
    return text.encode(encoding, errors="replace") if encoding == "gb18030" else text.encode()


def assert_lines_covered(drafts: list[ChunkDraft], lines: list[str], *, every_line: bool) -> None:
    covered: set[int] = set()
    for draft in drafts:
        start, end = draft.locator.get("line_start"), draft.locator.get("line_end")
        if start is None:
            continue
        assert 1 <= start <= end <= len(lines), (start, end, len(lines))
        covered.update(range(start, end + 1))
    starts = [draft.locator["line_start"] for draft in drafts if "line_start" in draft.locator]
    assert starts == sorted(starts)
    if every_line:
        with_text = {number for number, line in enumerate(lines, start=1) if line.strip()}
        assert with_text <= covered, sorted(with_text - covered)


@settings(PROFILE, max_examples=60)
@given(text=TEXTS, encoding=ENCODINGS, budget=BUDGETS, overlap=OVERLAPS)
def test_plain_text_keeps_every_character_and_every_line(text, encoding, budget, overlap):
    # given
    data = encoded(text, encoding)
    decoded = data.decode(encoding).replace("\x00", "")
    lines = decoded.replace("\r\n", "\n").replace("\r", "\n").split("\n")

    # when
    result = parse(data, "txt", encoding)

    # then
    if result is None:
        assert not decoded.strip()
        return
    drafts = chunk_document(
        result, document_key="doc", chunk_tokens=budget, overlap_tokens=overlap
    )
    assert_well_formed(drafts, budget)
    assert spells(visible(decoded), [visible(draft.content) for draft in drafts])
    assert_lines_covered(drafts, lines, every_line=True)
    for block in result.blocks:
        # A block is its source lines, right-stripped.
        first = block.locator.line - 1
        own = [line.rstrip() for line in lines[first : first + block.text.count("\n") + 1]]
        assert "\n".join(own).strip() == block.text.strip()


@settings(PROFILE, max_examples=60)
@given(text=TEXTS, encoding=ENCODINGS, budget=BUDGETS)
# Found here: a cut by tokens left a bare "\n" piece, which became an empty chunk.
@example(text="0000\U0002d0000000000000000000\n" + "a" * 53, encoding="utf-8", budget=8)
def test_markdown_and_html_never_crash_and_stay_inside_the_source(text, encoding, budget):
    # given
    data = encoded(text, encoding)
    lines = data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n").split("\n")

    for file_type in ("md", "html"):
        # when
        result = parse(data, file_type, encoding)
        if result is None:
            continue
        drafts = chunk_document(result, document_key="doc", chunk_tokens=budget, overlap_tokens=8)

        # then
        assert_well_formed(drafts, budget)
        if file_type == "md":
            assert_lines_covered(drafts, lines, every_line=False)


@settings(PROFILE, max_examples=40)
@given(
    rows=st.lists(
        st.lists(st.text(st.one_of(CJK, ASCII, CONTROL, EMOJI), max_size=12), min_size=2, max_size=4),
        min_size=1,
        max_size=12,
    ),
    encoding=ENCODINGS,
    budget=BUDGETS,
)
def test_csv_cells_are_all_in_table_chunks(rows, encoding, budget):
    # given
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    data = encoded(buffer.getvalue(), encoding)

    # when
    result = parse(data, "csv", encoding)

    # then
    if result is None:
        return
    drafts = chunk_document(result, document_key="doc", chunk_tokens=budget, overlap_tokens=8)
    assert_well_formed(drafts, budget)
    tables_ = [draft.content for draft in drafts if draft.content_type == "table"]
    # NUL is the one character decoding drops (PostgreSQL refuses it in text).
    cells = "".join(visible(cell) for row in rows for cell in row).replace("\x00", "")
    assert is_subsequence(cells.replace("|", "").replace("\\", ""), "".join(
        visible(table).replace("|", "").replace("\\", "").replace("---", "") for table in tables_
    ))
