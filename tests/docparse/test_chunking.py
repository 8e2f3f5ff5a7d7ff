from __future__ import annotations

import io
import re
from collections import Counter

import openpyxl
import pytest

import docparse.chunking
from docparse.chunking import ChunkDraft, chunk_document
from docparse import ParseLimits, parse_document
from docparse.types import BBox, Block, Locator, ParsedImage, ParseResult
from engines.tokens import count_tokens

SENTENCE = "员工出差前需要在系统中提交申请并获得主管批准。"
ENGLISH = "Travel must be approved by a manager before booking. "


def heading(text: str, level: int = 1, **locator) -> Block:
    return Block(kind="text", text=text, heading_level=level, locator=Locator(**locator))


def text(body: str, **locator) -> Block:
    return Block(kind="text", text=body, locator=Locator(**locator))


def chunk(
    blocks: list[Block], images: list[ParsedImage] | None = None, **options
) -> list[ChunkDraft]:
    options.setdefault("document_key", "doc-sha")
    return chunk_document(ParseResult(blocks=blocks, images=images or []), **options)


def test_sections_carry_heading_paths_and_stable_parent_ids():
    # given
    blocks = [
        heading("第一章 总则"),
        text("总则内容。"),
        heading("第一节 目的", 2),
        text("目的内容。"),
        heading("第二章 报销"),
        text("报销内容。"),
    ]

    # when
    first = chunk(blocks)
    again = chunk(blocks)
    other_document = chunk(blocks, document_key="another-sha")

    # then
    assert [draft.heading_path for draft in first] == [
        ("第一章 总则",),
        ("第一章 总则", "第一节 目的"),
        ("第二章 报销",),
    ]
    assert [draft.content for draft in first] == [
        "第一章 总则\n总则内容。",
        "第一节 目的\n目的内容。",
        "第二章 报销\n报销内容。",
    ]
    assert first == again
    assert len({draft.parent_id for draft in first}) == 3
    assert all(re.fullmatch(r"[0-9a-f]{16}", draft.parent_id) for draft in first)
    assert {d.parent_id for d in first}.isdisjoint({d.parent_id for d in other_document})
    assert [draft.ordinal for draft in first] == [0, 1, 2]


def test_children_fill_the_budget_split_between_sentences_with_overlap():
    # given
    blocks = [heading("差旅"), text(SENTENCE * 40, line=3)]
    sentence_tokens = count_tokens(SENTENCE)

    # when
    drafts = chunk(blocks, chunk_tokens=100, overlap_tokens=30)

    # then
    assert len(drafts) > 3
    assert len({draft.parent_id for draft in drafts}) == 1
    for draft in drafts:
        assert draft.token_count <= 100
        assert draft.content.endswith("。")
        assert draft.token_count == count_tokens(draft.content)
    for previous, current in zip(drafts, drafts[1:], strict=False):
        # The next child opens with the previous child's last whole sentences (≤ 30 tokens).
        overlap = SENTENCE * (30 // sentence_tokens)
        assert previous.content.endswith(overlap) and current.content.startswith(overlap)
    body = "".join(draft.content.removeprefix("差旅\n") for draft in drafts)
    assert body.count(SENTENCE) >= 40


def test_english_sentences_are_not_cut_midway():
    # given
    blocks = [text(ENGLISH * 30)]

    # when
    drafts = chunk(blocks, chunk_tokens=60, overlap_tokens=0)

    # then
    assert len(drafts) > 1
    assert all(draft.content.endswith("booking.") for draft in drafts)
    assert "".join(draft.content + " " for draft in drafts) == ENGLISH * 30


def test_a_sentence_longer_than_the_budget_is_split_by_tokens():
    # given
    long_sentence = "甲乙丙丁" * 200 + "。"

    # when
    drafts = chunk([text(long_sentence)], chunk_tokens=50, overlap_tokens=0)

    # then
    assert len(drafts) > 2
    assert all(draft.token_count <= 50 for draft in drafts)
    assert "".join(draft.content for draft in drafts) == long_sentence


def test_tables_split_between_rows_with_the_header_repeated_and_sheet_ranges():
    # given
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "费用"
    sheet.append(["编号", "类别", "金额", "说明"])
    for i in range(60):
        sheet.append([i, "差旅", i * 10, f"第{i}条费用说明"])
    buffer = io.BytesIO()
    workbook.save(buffer)
    result = parse_document(
        buffer.getvalue(), file_type="xlsx", filename="a.xlsx", limits=ParseLimits()
    )

    # when
    drafts = chunk_document(result, document_key="x", chunk_tokens=120, overlap_tokens=20)

    # then
    assert len(drafts) > 3
    header = "| 编号 | 类别 | 金额 | 说明 |\n| --- | --- | --- | --- |"
    covered_rows = []
    for draft in drafts:
        assert draft.content_type == "table"
        assert draft.heading_path == ("费用",)
        assert draft.content.startswith(header + "\n")
        rows = draft.content.split("\n")[2:]
        assert all(
            re.fullmatch(r"\| \d+ \| 差旅 \| \d+ \| 第\d+条费用说明 \|", row) for row in rows
        )
        first, last = int(rows[0].split("|")[1]), int(rows[-1].split("|")[1])
        assert draft.locator == {"sheet": "费用", "range": f"A{first + 2}:D{last + 2}"}
        covered_rows += rows
    assert len(covered_rows) == 60


def test_a_row_over_budget_is_cut_with_the_header_on_each_part():
    # given
    table = Block(
        kind="table",
        text="",
        table_header="| a |\n| --- |",
        table_rows=("| " + "很长的单元格内容" * 60 + " |", "| short |"),
    )

    # when
    drafts = chunk([table], chunk_tokens=80)

    # then
    assert len(drafts) >= 3
    assert all(draft.content.startswith("| a |\n| --- |\n") for draft in drafts)
    assert drafts[-1].content == "| a |\n| --- |\n| short |"


def test_pdf_chunks_report_page_range_and_bboxes():
    # given
    blocks = [
        Block(
            kind="text",
            text="概述",
            heading_level=1,
            locator=Locator(page=1),
            bboxes=(BBox(1, 72, 40, 200, 60),),
        ),
        Block(
            kind="text",
            text="第一页的内容。",
            locator=Locator(page=1),
            bboxes=(BBox(1, 72, 80, 500, 120),),
        ),
        Block(
            kind="text",
            text="第二页的内容。",
            locator=Locator(page=2),
            bboxes=(BBox(2, 72, 50, 500, 90),),
        ),
    ]

    # when
    drafts = chunk(blocks)

    # then
    assert len(drafts) == 1
    assert drafts[0].locator == {"page_start": 1, "page_end": 2}
    assert drafts[0].bboxes == [[1, 72, 40, 200, 60], [1, 72, 80, 500, 120], [2, 72, 50, 500, 90]]


def test_slide_and_line_locators():
    # given
    slides = [heading("标题", slide=2), text("要点一\n要点二", slide=2)]
    lines = [heading("标题", line=1), text("第一行\n第二行\n第三行", line=3)]

    # when
    slide_drafts = chunk(slides)
    line_drafts = chunk(lines)

    # then
    assert slide_drafts[0].locator == {"slide": 2}
    assert line_drafts[0].locator == {"line_start": 1, "line_end": 5}


def test_images_become_chunks_with_keys_and_placeholder_text():
    # given
    images = [
        ParsedImage(
            key="img-0001", jpeg=b"\xff\xd8", width=100, height=80, nearby_text="图1 审批流程"
        ),
        ParsedImage(
            key="img-0002", jpeg=b"\xff\xd8", width=100, height=80, ocr_text="发票 金额 100"
        ),
    ]
    blocks = [
        heading("流程"),
        text("审批流程如下。"),
        Block(kind="image", text="", image_keys=("img-0001",)),
        text("图1 审批流程"),
        Block(kind="image", text="", image_keys=("img-0002",)),
    ]

    # when
    drafts = chunk(blocks, images=images)

    # then
    assert [(d.content_type, d.content, d.image_keys) for d in drafts] == [
        ("text", "流程\n审批流程如下。\n图1 审批流程", ()),
        ("image", "[图片] 图1 审批流程", ("img-0001",)),
        ("image", "[图片] 发票 金额 100", ("img-0002",)),
    ]
    assert len({draft.parent_id for draft in drafts}) == 1


def test_no_empty_chunks_and_headings_of_empty_sections_are_kept():
    # given
    blocks = [
        heading("第一章"),
        heading("第一节", 2),
        text("   "),
        heading("第二节", 2),
        text("内容。"),
        heading("附录"),
    ]

    # when
    drafts = chunk(blocks)

    # then
    assert [(draft.heading_path, draft.content) for draft in drafts] == [
        (("第一章", "第二节"), "第一章\n第一节\n第二节\n内容。"),
        (("附录",), "附录"),
    ]
    assert all(draft.content.strip() for draft in drafts)
    assert chunk([]) == []


def test_tiny_trailing_fragment_joins_the_previous_chunk():
    # given: four sentences fill a chunk, one sentence of overlap, and a short last sentence
    filler = "这是一个用于填充预算的完整句子。"
    tail = "最后一句。"
    filler_tokens = count_tokens(filler)
    blocks = [text(filler * 7 + tail)]

    # when
    drafts = chunk(blocks, chunk_tokens=filler_tokens * 4 + 1, overlap_tokens=filler_tokens)

    # then: the tail joins the second chunk, which gives up its overlap to make room
    assert [draft.content for draft in drafts] == [filler * 4, filler * 3 + tail]


def test_long_sections_are_cut_into_several_parents():
    # given
    blocks = [heading("长章节"), text(SENTENCE * 200)]

    # when
    drafts = chunk(blocks, chunk_tokens=100, overlap_tokens=0, max_parent_tokens=300)

    # then
    parents = [draft.parent_id for draft in drafts]
    assert len(set(parents)) > 3
    assert parents == sorted(parents, key=parents.index)  # each parent's children are contiguous
    assert all(draft.heading_path == ("长章节",) for draft in drafts)


@pytest.mark.parametrize("budget", [0, -5])
def test_budget_must_be_positive(budget):
    # when / then
    with pytest.raises(ValueError):
        chunk([text("x")], chunk_tokens=budget)


@pytest.fixture
def tokenized(monkeypatch) -> Counter:
    """Every text the chunker tokenizes, with how often."""
    seen: Counter = Counter()

    def counting(text: str) -> int:
        seen[text] += 1
        return count_tokens(text)

    monkeypatch.setattr(docparse.chunking, "count_tokens", counting)
    return seen


def test_no_text_is_tokenized_twice(tokenized):
    # given: distinct sentences over several chunks, a table and an image
    sentences = "".join(f"第{i}条规定要求员工遵守第{i}项制度。" for i in range(40))
    table = Block(
        kind="table", text="", table_header="| a | b |\n| --- | --- |", table_rows=("| 1 | 2 |",)
    )
    image = Block(kind="image", text="图1 流程", image_keys=("img-0001",))

    # when
    drafts = chunk([heading("制度"), text(sentences), table, image], chunk_tokens=80)

    # then
    assert len(drafts) > 4
    assert {draft.content_type for draft in drafts} == {"text", "table", "image"}
    assert [text for text, times in tokenized.items() if times > 1] == []


def test_cutting_unpunctuated_text_tokenizes_each_part_of_it_a_bounded_number_of_times(tokenized):
    # given: 30,000 characters with no sentence end or line break to cut at
    body = "甲乙丙丁戊己庚辛" * 3_750

    # when
    drafts = chunk([text(body)], chunk_tokens=100, overlap_tokens=0)

    # then: searching each cut only near the cut keeps the work linear (it was ~300x)
    assert sum(len(text) * times for text, times in tokenized.items()) < 20 * len(body)
    assert "".join(draft.content for draft in drafts) == body
    assert all(draft.token_count <= 100 for draft in drafts)
