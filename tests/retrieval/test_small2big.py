"""Small2Big expansion: same document and parent, ±1 neighbour, token budget, anchors kept."""

from retrieval.small2big import expand, neighbour_positions

from .fakes import chunk


def rows(*specs):
    return {(c.document_id, c.ordinal): c for c in specs}


def test_expands_with_both_neighbours_of_the_same_parent():
    # given
    prev, hit, nxt = chunk(1, 7, "前文。", ordinal=0), chunk(2, 7, "命中。", ordinal=1), chunk(3, 7, "后文。", ordinal=2)
    # when
    expansion = expand(hit, rows(prev, nxt))
    # then
    assert expansion.context_chunk_ids == (1, 2, 3)
    assert expansion.content == "前文。\n命中。\n后文。"


def test_never_crosses_parent_or_document():
    hit = chunk(2, 7, "命中。", ordinal=1, parent_id="a")
    other_parent = chunk(1, 7, "别的章节。", ordinal=0, parent_id="b")
    expansion = expand(hit, rows(other_parent, chunk(3, 8, "别的文档。", ordinal=2, parent_id="a")))
    assert expansion.context_chunk_ids == (2,)
    assert expansion.content == "命中。"


def test_respects_the_token_budget():
    # given: hit 1000 tokens, each neighbour 400; budget 1536 fits one neighbour only
    hit = chunk(2, 7, "命中。", ordinal=1, tokens=1000)
    prev, nxt = chunk(1, 7, "前文。", ordinal=0, tokens=400), chunk(3, 7, "后文。", ordinal=2, tokens=400)
    # when
    expansion = expand(hit, rows(prev, nxt), budget_tokens=1536)
    # then: the previous neighbour is taken first
    assert expansion.context_chunk_ids == (1, 2)


def test_hit_over_budget_stays_alone():
    hit = chunk(2, 7, "很长的命中。", ordinal=1, tokens=2000)
    assert expand(hit, rows(chunk(1, 7, "前", ordinal=0))).context_chunk_ids == (2,)


def test_legacy_chunks_without_parent_expand_only_with_identical_locator():
    hit = chunk(2, 7, "命中。", ordinal=1, parent_id="", locator={"page_start": 3, "page_end": 3})
    same = chunk(1, 7, "同页。", ordinal=0, parent_id="", locator={"page_start": 3, "page_end": 3})
    other = chunk(3, 7, "下一页。", ordinal=2, parent_id="", locator={"page_start": 4, "page_end": 4})
    assert expand(hit, rows(same, other)).context_chunk_ids == (1, 2)


def test_chunker_overlap_is_not_repeated():
    prev = chunk(1, 7, "第一句话很长很长。第二句话也很长很长。", ordinal=0)
    hit = chunk(2, 7, "第二句话也很长很长。第三句话。", ordinal=1)
    assert expand(hit, rows(prev)).content == "第一句话很长很长。第二句话也很长很长。第三句话。"


def test_neighbour_positions_are_batched_and_non_negative():
    positions = neighbour_positions([chunk(1, 7, "a", ordinal=0), chunk(5, 8, "b", ordinal=4)])
    assert sorted(positions) == [(7, 1), (8, 3), (8, 5)]


def test_assets_and_content_types_of_the_range():
    hit = chunk(2, 7, "表格", ordinal=1, content_type="table", asset_ids=(9,))
    image = chunk(3, 7, "[图片] 面板", ordinal=2, content_type="image", asset_ids=(10,))
    expansion = expand(hit, rows(image))
    assert expansion.content_types == ("table", "image")
    assert expansion.asset_ids == (9, 10)
