"""Regression set: exact terms, names and codes found by the sparse channel in Milvus Lite."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from engines.milvus_store import MilvusVectorStore
from engines.ports import ChunkRecord, DocumentFilter
from tests.milvus import start_milvus_lite

DIM = 8
ANY_DOCUMENT = DocumentFilter()

CORPUS = {
    1: "LX-9000 工业清洗机的额定功率为 2.2kW，水箱容量 40 升。",
    2: "LX-8000 清洗机的额定功率为 1.5kW，适合小型车间。",
    3: "PPR-9087 管件的耐压等级为 PN20，适用于热水管道。",
    4: "星河X3 Pro 支持 65W 快充，电池容量 5000mAh。",
    5: "星河X5 支持 100W 快充，屏幕为 6.8 英寸。",
    6: "冷链运输全程温度须保持在2℃至8℃之间，超出须上报。",
    7: "叉车最大载重3.5吨，超载禁止作业。",
    8: "普通货车载重5吨，需要持证驾驶。",
    9: "員工出差報銷需在返回後三十日內提交。",
    10: "Employees running the quarterly reports must file them by Friday.",
    11: "The cafeteria opens at seven and closes at nine.",
    12: "星河云盘为每位员工提供 2TB 存储空间。",
    13: "星河手机用户可以免费使用云盘同步相册。",
}

CASES = [
    ("LX-9000", 1),
    ("lx9000 的功率", 1),
    ("LX 9000 功率是多少", 1),
    ("PPR-9087", 3),
    ("ppr9087 耐压", 3),
    ("X3 Pro 快充多少瓦", 4),
    ("星河X5 屏幕", 5),
    ("2℃", 6),
    ("2°C 到 8°C", 6),
    ("3.5吨", 7),
    ("员工报销期限", 9),  # the chunk is in traditional characters
    ("員工報銷", 9),
    ("who runs the quarterly report", 10),  # stemming: runs / running, report / reports
    ("REPORTS", 10),
]


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusVectorStore]:
    uri, stop = start_milvus_lite(tmp_path_factory.mktemp("milvus"))
    store = MilvusVectorStore(
        uri=uri, collection_prefix=f"t{uuid.uuid4().hex[:12]}", embedding_model="terms-test",
        dimension=DIM,
    )
    vector = [1.0] + [0.0] * (DIM - 1)
    store.upsert_chunks(
        [ChunkRecord(chunk_id=i, kb_id=1, document_id=100 + i, content=text, content_type="text", vector=vector)
         for i, text in CORPUS.items()],
        dictionary=("星河云盘",),
    )
    yield store
    store.close()
    stop()


@pytest.mark.parametrize(("query", "best"), CASES)
def test_the_chunk_with_the_term_ranks_first(corpus_store, query, best):
    # when
    hits = corpus_store.search_sparse(kb_id=1, query=query, limit=5, documents=ANY_DOCUMENT)

    # then
    assert hits, query
    assert hits[0].id == best, [(h.id, round(h.score, 3)) for h in hits]


def test_a_number_with_its_unit_beats_the_same_unit_with_another_number(corpus_store):
    # when
    hits = corpus_store.search_sparse(kb_id=1, query="载重3.5吨", limit=5, documents=ANY_DOCUMENT)

    # then: "5吨" shares 载重 and 吨 but not "3.5吨"
    scores = {h.id: h.score for h in hits}
    assert scores[7] > scores[8]


def test_a_dictionary_term_finds_the_chunk_that_has_it_whole(corpus_store):
    # when
    hits = corpus_store.search_sparse(
        kb_id=1, query="星河云盘", limit=5, documents=ANY_DOCUMENT, dictionary=("星河云盘",)
    )

    # then: 13 has 星河 and 云盘 apart; 12 has the product name
    assert hits[0].id == 12
    assert {h.id: h.score for h in hits}[12] > {h.id: h.score for h in hits}[13]


def test_english_stop_words_alone_find_nothing(corpus_store):
    assert corpus_store.search_sparse(kb_id=1, query="the and at", limit=5, documents=ANY_DOCUMENT) == []
