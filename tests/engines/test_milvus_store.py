"""MilvusVectorStore against a real Milvus Lite server (the C++ engine over gRPC on loopback)."""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.exceptions import ImproperlyConfigured
from pymilvus import DataType, MilvusClient

from engines.analysis import MILVUS_ANALYZER_PARAMS, analysed_text
from engines.milvus_store import (
    DenseIndex,
    MilvusVectorStore,
    _fit_utf8,
    get_vector_store,
    reset_vector_store_cache,
)
from engines.ports import (
    ChunkRecord,
    DocumentFilter,
    FaqRecord,
    IncompatibleCollection,
    KbDocuments,
    VectorStore,
    VectorStoreError,
    VectorStoreUnavailable,
)
from tests.live import free_port
from tests.milvus import admin_client, start_milvus_lite

DIM = 8
MODEL = "test-model-v1"
ANY_DOCUMENT = DocumentFilter()


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def milvus_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    uri, stop = start_milvus_lite(tmp_path_factory.mktemp("milvus"))
    yield uri
    stop()


@pytest.fixture(scope="module")
def raw_client(milvus_uri: str) -> Iterator[MilvusClient]:
    client = admin_client(milvus_uri)
    yield client
    client.close()


@pytest.fixture
def make_store(milvus_uri: str) -> Iterator[Callable[..., MilvusVectorStore]]:
    """Stores on the shared server; each test gets its own collection prefix."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    stores: list[MilvusVectorStore] = []

    def make(**overrides: object) -> MilvusVectorStore:
        options: dict = {
            "uri": milvus_uri,
            "collection_prefix": prefix,
            "embedding_model": MODEL,
            "dimension": DIM,
            "timeout": 10.0,
        }
        options.update(overrides)
        store = MilvusVectorStore(**options)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


@pytest.fixture
def store(make_store: Callable[..., MilvusVectorStore]) -> MilvusVectorStore:
    return make_store()


def unit(*values: float) -> list[float]:
    padded = list(values) + [0.0] * (DIM - len(values))
    norm = math.sqrt(sum(v * v for v in padded))
    return [v / norm for v in padded]


def chunk(
    chunk_id: int, *, kb: int = 1, doc: int = 10, text: str = "内容", vector=None
) -> ChunkRecord:
    return ChunkRecord(
        chunk_id=chunk_id,
        kb_id=kb,
        document_id=doc,
        content=text,
        content_type="text",
        vector=vector if vector is not None else unit(1.0),
    )


def row_ids(client: MilvusClient, collection: str, expr: str = "id >= 0") -> list[int]:
    rows = client.query(collection, filter=expr, output_fields=["id"], limit=16_384)
    return sorted(int(r["id"]) for r in rows)



def create_raw_collection(client: MilvusClient, name: str, *, dim: int, description: str) -> None:
    schema = MilvusClient.create_schema(auto_id=False, description=description)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
    params = MilvusClient.prepare_index_params()
    params.add_index("dense", index_type="AUTOINDEX", metric_type="COSINE")
    client.create_collection(name, schema=schema, index_params=params)


# --- collections ---------------------------------------------------------------------------------


def test_store_satisfies_the_port(store):
    # then
    assert isinstance(store, VectorStore)


@pytest.mark.parametrize(
    ("analysis", "suffix", "version", "analyzer"),
    [
        ("terms-v1", "_t1", "v2", MILVUS_ANALYZER_PARAMS),
        # knowledge bases created before terms-v1 keep their collections and Milvus's jieba
        ("jieba", "", "v1", {"tokenizer": "jieba", "filter": ["lowercase"]}),
    ],
)
def test_first_use_creates_marked_indexed_loaded_collections(make_store, raw_client, analysis, suffix, version, analyzer):
    # given
    store = make_store(analysis=analysis)
    store.upsert_chunks([chunk(1)])
    store.upsert_faqs(
        [FaqRecord(record_id=1, kb_id=1, faq_id=7, question="怎么退货", vector=unit(1))]
    )

    # when
    chunks = raw_client.describe_collection(store.chunks_collection)
    faqs = raw_client.describe_collection(store.faqs_collection)

    # then
    assert store.chunks_collection == f"{store.collection_prefix}_chunks_test_model_v1_{DIM}{suffix}"
    assert json.loads(chunks["description"]) == {
        "schema": f"ragsite.chunks.{version}",
        "model": MODEL,
        "dim": DIM,
    }
    assert json.loads(faqs["description"]) == {
        "schema": f"ragsite.faqs.{version}",
        "model": MODEL,
        "dim": DIM,
    }
    fields = {f["name"]: f for f in chunks["fields"]}
    assert set(fields) == {
        "id",
        "kb_id",
        "document_id",
        "content_type",
        "content",
        "sparse",
        "dense",
    }
    assert json.loads(fields["content"]["params"]["analyzer_params"]) == analyzer
    indexes = {
        field: raw_client.describe_index(store.chunks_collection, field)
        for field in ("dense", "sparse", "kb_id", "document_id")
    }
    assert indexes["dense"]["metric_type"] == "COSINE"
    assert (indexes["sparse"]["index_type"], indexes["sparse"]["metric_type"]) == (
        "SPARSE_INVERTED_INDEX",
        "BM25",
    )
    assert indexes["kb_id"]["index_type"] == indexes["document_id"]["index_type"] == "INVERTED"
    assert raw_client.list_indexes(store.faqs_collection, field_name="faq_id") == ["faq_id"]
    for name in (store.chunks_collection, store.faqs_collection):
        assert raw_client.get_load_state(name)["state"].name == "Loaded"


def test_two_stores_racing_to_create_the_same_collection_both_succeed(make_store):
    # given two stores (as two processes would have) starting at the same moment
    first, second = make_store(), make_store()
    barrier = threading.Barrier(2)

    def open_collections(store: MilvusVectorStore) -> None:
        barrier.wait()
        store.ensure_collections()

    # when
    with ThreadPoolExecutor(2) as pool:
        results = [pool.submit(open_collections, s) for s in (first, second)]

    # then
    assert [r.exception() for r in results] == [None, None]
    first.upsert_chunks([chunk(1)])
    assert [
        h.id for h in second.search_dense(kb_id=1, vector=unit(1), limit=5, documents=ANY_DOCUMENT)
    ] == [1]


def test_collection_dropped_behind_the_stores_back_is_recreated(store, raw_client):
    # given
    store.upsert_chunks([chunk(1)])
    raw_client.drop_collection(store.chunks_collection)

    # when
    store.upsert_chunks([chunk(2)])

    # then
    assert row_ids(raw_client, store.chunks_collection) == [2]


# --- incompatible collections --------------------------------------------------------------------


def test_collection_without_marker_is_incompatible(store, raw_client):
    # given a collection of the same name made by some other tool
    create_raw_collection(raw_client, store.chunks_collection, dim=DIM, description="")

    # when
    with pytest.raises(IncompatibleCollection) as error:
        store.search_dense(kb_id=1, vector=unit(1), limit=5, documents=ANY_DOCUMENT)

    # then
    message = str(error.value)
    assert store.chunks_collection in message
    assert "no ragsite schema marker" in message
    assert "missing fields" in message


def test_collection_with_another_dimension_is_incompatible(store, raw_client):
    # given a marked collection whose vectors are 16-dimensional
    marker = json.dumps({"schema": "ragsite.chunks.v1", "model": MODEL, "dim": 16})
    create_raw_collection(raw_client, store.chunks_collection, dim=16, description=marker)

    # when
    with pytest.raises(IncompatibleCollection) as error:
        store.upsert_chunks([chunk(1)])

    # then
    message = str(error.value)
    assert store.chunks_collection in message
    assert "marker says dimension 16" in message
    assert f"dense vectors have dimension 16, expected {DIM}" in message


def test_collection_of_another_model_with_the_same_slug_is_incompatible(make_store):
    # given "test-model-v1" and "test_model_v1" map to the same collection name
    make_store(embedding_model="test-model-v1").upsert_chunks([chunk(1)])
    other = make_store(embedding_model="test_model_v1")

    # when
    with pytest.raises(IncompatibleCollection) as error:
        other.search_sparse(kb_id=1, query="内容", limit=5, documents=ANY_DOCUMENT)

    # then
    assert "built for embedding model 'test-model-v1'" in str(error.value)


# --- writes --------------------------------------------------------------------------------------


def test_upserting_the_same_id_twice_keeps_one_row_with_the_latest_content(store, raw_client):
    # given
    store.upsert_chunks([chunk(1, text="旧的说明")])

    # when
    store.upsert_chunks([chunk(1, text="新的说明")])
    store.upsert_chunks([chunk(1, text="重复一"), chunk(1, text="最新说明")])

    # then
    rows = raw_client.query(store.chunks_collection, filter="id == 1", output_fields=["content"])
    assert [r["content"] for r in rows] == ["最新 说明"]  # the analysed terms BM25 reads
    assert store.search_sparse(kb_id=1, query="旧的", limit=5, documents=ANY_DOCUMENT) == []


def test_large_upserts_are_sent_in_batches(store, raw_client):
    # given more rows than one batch holds
    records = [chunk(i, doc=i % 7, text=f"第{i}条") for i in range(1, 1202)]

    # when
    store.upsert_chunks(records)

    # then
    assert len(row_ids(raw_client, store.chunks_collection)) == 1201


def test_delete_document_removes_only_that_documents_chunks(store, raw_client):
    # given
    store.upsert_chunks(
        [chunk(1, doc=10), chunk(2, doc=10), chunk(3, doc=11), chunk(4, kb=2, doc=10)]
    )

    # when
    store.delete_document(kb_id=1, document_id=10)

    # then
    assert row_ids(raw_client, store.chunks_collection) == [3, 4]


def test_content_longer_than_varchar_is_cut_at_a_character_boundary(store, raw_client, caplog):
    # given 90,000 UTF-8 bytes of Chinese; the searchable word is near the start
    content = "星河X3的退货说明。" + "很长的说明文字" * 4_300

    # when
    with caplog.at_level(logging.WARNING, logger="engines.milvus_store"):
        store.upsert_chunks([chunk(1, text=content)])

    # then
    stored = raw_client.query(store.chunks_collection, filter="id == 1", output_fields=["content"])[
        0
    ]["content"]
    assert len(stored.encode("utf-8")) <= 65_535
    assert analysed_text(content).startswith(stored)
    assert "chunk 1 content" in caplog.text
    assert [
        h.id for h in store.search_sparse(kb_id=1, query="退货", limit=5, documents=ANY_DOCUMENT)
    ] == [1]


def test_utf8_cut_never_splits_a_character():
    # given "ab" + three 3-byte characters
    text = "ab中文字"

    # then
    assert _fit_utf8(text, 5, what="t") == "ab中"
    assert _fit_utf8(text, 7, what="t") == "ab中"
    assert _fit_utf8(text, 8, what="t") == "ab中文"
    assert _fit_utf8(text, 100, what="t") == text


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_vectors_with_nan_or_inf_are_refused(store, raw_client, bad):
    # given: Milvus would store such a row, and dense search would never find it again
    vector = [bad] + unit(1.0)[1:]

    # when
    with pytest.raises(VectorStoreError) as upsert_error:
        store.upsert_chunks([chunk(1), chunk(2, vector=vector)])
    with pytest.raises(VectorStoreError) as search_error:
        store.search_dense(kb_id=1, vector=vector, limit=5, documents=ANY_DOCUMENT)

    # then
    assert "chunk 2" in str(upsert_error.value) and "NaN" in str(upsert_error.value)
    assert "query" in str(search_error.value)
    assert not raw_client.has_collection(store.chunks_collection)  # nothing was written


# --- dense search --------------------------------------------------------------------------------


def test_dense_search_ranks_by_cosine_similarity(store):
    # given chunks at 0°, 30° and 90° from the query
    store.upsert_chunks(
        [
            chunk(1, doc=11, vector=unit(math.cos(math.radians(30)), math.sin(math.radians(30)))),
            chunk(2, doc=12, vector=unit(0.0, 1.0)),
            chunk(3, doc=13, vector=unit(1.0)),
        ]
    )

    # when
    hits = store.search_dense(kb_id=1, vector=unit(1.0), limit=10, documents=ANY_DOCUMENT)

    # then
    assert [(h.id, h.document_id) for h in hits] == [(3, 13), (1, 11), (2, 12)]
    assert [round(h.score, 4) for h in hits] == [1.0, round(math.cos(math.radians(30)), 4), 0.0]


def test_dense_search_honours_the_limit(store):
    # given
    store.upsert_chunks([chunk(i, vector=unit(1.0, i / 10)) for i in range(1, 6)])

    # when
    hits = store.search_dense(kb_id=1, vector=unit(1.0), limit=2, documents=ANY_DOCUMENT)

    # then
    assert [h.id for h in hits] == [1, 2]


# --- BM25 search with the jieba analyzer ---------------------------------------------------------

JIEBA_CORPUS = {
    1: "星河X3 手机的退货期限为15天，运费200元由商家承担。",
    2: "星星和河流在夜晚很美，X光检查需要3天。",
    3: "请先安装VPN客户端，然后使用工号登录。",
    4: "客户服务热线的端口号为8080。",
}


@pytest.fixture
def jieba_store(store: MilvusVectorStore) -> MilvusVectorStore:
    store.upsert_chunks([chunk(i, doc=100 + i, text=t) for i, t in JIEBA_CORPUS.items()])
    return store


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # "星河X3" is cut into 星河 / X3; lowercase makes "x3" match "X3"
        ("x3", [1]),
        ("星河X3", [1]),
        # a word inside an unspaced sentence: only a word segmenter finds it
        ("退货", [1]),
        ("vpn", [3]),
    ],
)
def test_bm25_search_matches_jieba_words_only(jieba_store, query, expected):
    # when
    hits = jieba_store.search_sparse(kb_id=1, query=query, limit=10, documents=ANY_DOCUMENT)

    # then
    assert [h.id for h in hits] == expected
    assert all(h.score > 0 for h in hits)


@pytest.mark.parametrize(
    ("query", "best"), [("15天", 1), ("200元", 1), ("客户端", 3), ("VPN客户端", 3)]
)
def test_bm25_search_ranks_the_chunk_with_the_words_first(jieba_store, query, best):
    # when
    hits = jieba_store.search_sparse(kb_id=1, query=query, limit=10, documents=ANY_DOCUMENT)

    # then
    assert hits[0].id == best
    assert hits[0].document_id == 100 + best
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_blank_bm25_query_returns_nothing(jieba_store):
    # then
    assert jieba_store.search_sparse(kb_id=1, query="  ", limit=10, documents=ANY_DOCUMENT) == []


# --- filters -------------------------------------------------------------------------------------


def test_knowledge_bases_are_isolated(store):
    # given the same text and vector in two knowledge bases
    store.upsert_chunks(
        [chunk(1, kb=1, doc=10, text="星河X3 退货"), chunk(2, kb=2, doc=20, text="星河X3 退货")]
    )

    # when
    dense = store.search_dense(kb_id=2, vector=unit(1.0), limit=10, documents=ANY_DOCUMENT)
    sparse = store.search_sparse(kb_id=2, query="星河X3", limit=10, documents=ANY_DOCUMENT)
    empty_kb = store.search_dense(kb_id=3, vector=unit(1.0), limit=10, documents=ANY_DOCUMENT)

    # then
    assert [h.id for h in dense] == [2]
    assert [h.id for h in sparse] == [2]
    assert empty_kb == []


def test_document_filters_include_and_exclude(store):
    # given
    store.upsert_chunks([chunk(i, doc=10 + i, text="退货政策") for i in range(1, 5)])

    # when
    included = store.search_sparse(
        kb_id=1, query="退货", limit=10, documents=DocumentFilter(include=(12, 14))
    )
    excluded = store.search_dense(
        kb_id=1, vector=unit(1.0), limit=10, documents=DocumentFilter(exclude=(11, 13))
    )
    nothing_excluded = store.search_dense(
        kb_id=1, vector=unit(1.0), limit=10, documents=DocumentFilter(exclude=())
    )

    # then
    assert sorted(h.document_id for h in included) == [12, 14]
    assert sorted(h.document_id for h in excluded) == [12, 14]
    assert len(nothing_excluded) == 4


def test_one_search_covers_several_knowledge_bases_each_with_its_own_filter(store):
    # given: three knowledge bases with two documents each, all alike
    store.upsert_chunks([
        chunk(kb * 10 + i, kb=kb, doc=kb * 100 + i, text="星河X3 退货政策") for kb in (1, 2, 3) for i in (1, 2)
    ])

    # when: kb 1 with no filter, kb 2 without its document 202, kb 3 left out
    also = [KbDocuments(2, DocumentFilter(exclude=(202,)))]
    dense = store.search_dense(kb_id=1, vector=unit(1.0), limit=10, documents=ANY_DOCUMENT, also=also)
    sparse = store.search_sparse(kb_id=1, query="退货", limit=10, documents=ANY_DOCUMENT, also=also)
    only_included = store.search_dense(
        kb_id=3, vector=unit(1.0), limit=10, documents=DocumentFilter(include=(301,)),
        also=[KbDocuments(2, DocumentFilter(include=()))],
    )

    # then: every admitted document of both and nothing else, in one ranking
    assert sorted(h.document_id for h in dense) == [101, 102, 201]
    assert sorted(h.document_id for h in sparse) == [101, 102, 201]
    assert [h.document_id for h in only_included] == [301]


def test_faqs_of_several_knowledge_bases_are_searched_together(store):
    store.upsert_faqs([
        FaqRecord(record_id=kb, kb_id=kb, faq_id=kb * 10, question="星河X3怎么退货", vector=unit(1.0)) for kb in (1, 2, 3)
    ])
    dense = store.search_faq_dense(kb_id=1, vector=unit(1.0), limit=10, also_kb_ids=[3])
    sparse = store.search_faq_sparse(kb_id=2, query="退货", limit=10, also_kb_ids=[3])
    assert sorted(h.document_id for h in dense) == [10, 30]
    assert sorted(h.document_id for h in sparse) == [20, 30]


def test_empty_include_returns_nothing_without_calling_milvus(make_store):
    # given a store whose server does not exist: any call to Milvus would fail
    store = make_store(uri=f"http://127.0.0.1:{free_port()}", timeout=2.0)
    nothing = DocumentFilter(include=())

    # when
    dense = store.search_dense(kb_id=1, vector=unit(1.0), limit=10, documents=nothing)
    sparse = store.search_sparse(kb_id=1, query="退货", limit=10, documents=nothing)

    # then
    assert dense == [] and sparse == []
    with pytest.raises(VectorStoreUnavailable):
        store.search_dense(
            kb_id=1, vector=unit(1.0), limit=10, documents=DocumentFilter(include=(1,))
        )


# --- FAQs ----------------------------------------------------------------------------------------


def test_faq_questions_are_searched_per_kb_and_deleted_by_faq(store):
    # given two questions of FAQ 7, one of FAQ 8, and FAQ 9 in another knowledge base
    store.upsert_faqs(
        [
            FaqRecord(record_id=1, kb_id=1, faq_id=7, question="星河X3怎么退货", vector=unit(1.0)),
            FaqRecord(
                record_id=2, kb_id=1, faq_id=7, question="退货流程是什么", vector=unit(1.0, 0.2)
            ),
            FaqRecord(
                record_id=3, kb_id=1, faq_id=8, question="VPN客户端下载", vector=unit(0.0, 1.0)
            ),
            FaqRecord(record_id=4, kb_id=2, faq_id=9, question="星河X3怎么退货", vector=unit(1.0)),
        ]
    )

    # when
    dense = store.search_faq_dense(kb_id=1, vector=unit(1.0), limit=10)
    sparse = store.search_faq_sparse(kb_id=1, query="客户端", limit=10)
    store.delete_faqs(kb_id=1, faq_ids=[7])
    after_delete = store.search_faq_dense(kb_id=1, vector=unit(1.0), limit=10)

    # then
    assert [(h.id, h.document_id) for h in dense] == [(1, 7), (2, 7), (3, 8)]
    assert [(h.id, h.document_id) for h in sparse] == [(3, 8)]
    assert [(h.id, h.document_id) for h in after_delete] == [(3, 8)]
    assert [h.id for h in store.search_faq_dense(kb_id=2, vector=unit(1.0), limit=10)] == [4]


# --- concurrency and failures --------------------------------------------------------------------


def test_concurrent_dense_and_sparse_searches_share_one_store(jieba_store):
    # given the answers of sequential calls
    def dense() -> list:
        return jieba_store.search_dense(
            kb_id=1, vector=unit(1.0, 0.3), limit=3, documents=ANY_DOCUMENT
        )

    def sparse() -> list:
        return jieba_store.search_sparse(kb_id=1, query="15天", limit=3, documents=ANY_DOCUMENT)

    expected = {"dense": dense(), "sparse": sparse()}

    # when
    with ThreadPoolExecutor(8) as pool:
        futures = [
            (kind, pool.submit(dense if kind == "dense" else sparse))
            for kind in ["dense", "sparse"] * 40
        ]
        results = [(kind, future.result()) for kind, future in futures]

    # then
    assert all(hits == expected[kind] for kind, hits in results)


def test_server_going_down_raises_vector_store_unavailable(tmp_path):
    # given a store that worked against a second server
    uri, stop = start_milvus_lite(tmp_path)
    store = MilvusVectorStore(
        uri=uri, collection_prefix="down", embedding_model=MODEL, dimension=DIM, timeout=3.0
    )
    try:
        store.upsert_chunks([chunk(1)])
        assert (
            len(store.search_dense(kb_id=1, vector=unit(1.0), limit=1, documents=ANY_DOCUMENT)) == 1
        )

        # when
        stop()
        started = time.monotonic()
        with pytest.raises(VectorStoreUnavailable) as error:
            store.search_sparse(kb_id=1, query="内容", limit=5, documents=ANY_DOCUMENT)
        elapsed = time.monotonic() - started
    finally:
        stop()
        store.close()

    # then
    message = str(error.value)
    assert uri in message
    assert "unavailable" in message
    assert "Traceback" not in message and "\n" not in message
    assert elapsed < 10


def test_no_server_at_all_raises_vector_store_unavailable(make_store):
    # given
    store = make_store(uri=f"http://127.0.0.1:{free_port()}", timeout=2.0)

    # when
    with pytest.raises(VectorStoreUnavailable) as error:
        store.upsert_chunks([chunk(1)])

    # then
    assert "cannot connect" in str(error.value)


def test_server_that_never_answers_raises_unavailable_within_the_timeout(make_store):
    # given a port that accepts TCP connections but never speaks gRPC
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        store = make_store(uri=f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=1.0)
        started = time.monotonic()

        # when
        with pytest.raises(VectorStoreUnavailable):
            store.search_dense(kb_id=1, vector=unit(1.0), limit=5, documents=ANY_DOCUMENT)

    # then
    assert time.monotonic() - started < 5


def test_a_db_path_runs_an_embedded_milvus_lite(tmp_path):
    # given a path whose directory does not exist yet
    store = MilvusVectorStore(
        uri=str(tmp_path / "var" / "milvus" / "embedded.db"),
        collection_prefix="embedded",
        embedding_model=MODEL,
        dimension=DIM,
    )
    try:
        # when
        store.upsert_chunks([chunk(1, text="星河X3 的退货说明")])
        hits = store.search_sparse(kb_id=1, query="退货", limit=5, documents=ANY_DOCUMENT)
    finally:
        store.close()

    # then
    assert [h.id for h in hits] == [1]


def test_a_db_path_that_cannot_be_created_raises_vector_store_unavailable(tmp_path):
    # given a .db path whose "directory" is a regular file
    (tmp_path / "not-a-dir").write_text("")
    store = MilvusVectorStore(
        uri=str(tmp_path / "not-a-dir" / "milvus.db"),
        collection_prefix="embedded",
        embedding_model=MODEL,
        dimension=DIM,
    )

    # when
    with pytest.raises(VectorStoreUnavailable) as error:
        store.ping()

    # then
    assert "cannot be opened" in str(error.value)


# --- factory -------------------------------------------------------------------------------------


@pytest.fixture
def clean_store_cache() -> Iterator[None]:
    reset_vector_store_cache()
    yield
    reset_vector_store_cache()


def test_factory_caches_one_store_per_embedding_space(settings, milvus_uri, clean_store_cache):
    # given
    settings.MILVUS_URI = milvus_uri
    settings.MILVUS_TOKEN = ""
    settings.MILVUS_COLLECTION_PREFIX = "factory"

    # when
    first = get_vector_store(embedding_model=MODEL, dimension=DIM)
    again = get_vector_store(embedding_model=MODEL, dimension=DIM)
    other_dim = get_vector_store(embedding_model=MODEL, dimension=DIM * 2)
    reset_vector_store_cache()
    after_reset = get_vector_store(embedding_model=MODEL, dimension=DIM)

    # then
    assert first is again
    assert other_dim is not first and other_dim.dimension == DIM * 2
    assert after_reset is not first
    assert (first.uri, first.collection_prefix) == (milvus_uri, "factory")


def test_the_dense_index_is_the_configured_one_and_searches_use_its_parameters(
    settings, milvus_uri, raw_client, clean_store_cache
):
    # given: an IVF index asked for in settings (the type Milvus Lite builds besides FLAT)
    settings.MILVUS_URI = milvus_uri
    settings.MILVUS_COLLECTION_PREFIX = f"ivf{uuid.uuid4().hex[:8]}"
    settings.MILVUS_DENSE_INDEX = "ivf_flat"
    settings.MILVUS_DENSE_INDEX_PARAMS = '{"nlist": 4}'
    settings.MILVUS_DENSE_SEARCH_PARAMS = '{"nprobe": 4}'
    store = get_vector_store(embedding_model=MODEL, dimension=DIM)

    # when
    store.upsert_chunks([chunk(i, doc=10 + i, vector=unit(1.0, i / 10)) for i in range(1, 6)])
    hits = store.search_dense(kb_id=1, vector=unit(1.0), limit=3, documents=ANY_DOCUMENT)

    # then: the collection carries that index with its parameters, and the search answers
    index = raw_client.describe_index(store.chunks_collection, "dense")
    assert index["index_type"] == "IVF_FLAT" and str(index.get("nlist")) == "4"
    assert [h.id for h in hits] == [1, 2, 3]


@pytest.mark.parametrize("setting, value, message", [
    ("MILVUS_DENSE_INDEX_PARAMS", "{M: 16}", "not JSON"),
    ("MILVUS_DENSE_SEARCH_PARAMS", "[128]", "JSON object"),
    ("MILVUS_DENSE_INDEX", "NOT_AN_INDEX", "not one of"),
])
def test_a_bad_dense_index_setting_names_itself(settings, milvus_uri, clean_store_cache, setting, value, message):
    settings.MILVUS_URI = milvus_uri
    setattr(settings, setting, value)
    with pytest.raises(ImproperlyConfigured, match=message):
        get_vector_store(embedding_model=MODEL, dimension=DIM)


def test_milvus_lite_refuses_an_index_it_cannot_build(tmp_path):
    with pytest.raises(ValueError, match="Milvus Lite"):
        MilvusVectorStore(uri=str(tmp_path / "lite.db"), collection_prefix="t", embedding_model=MODEL,
                          dimension=DIM, dense_index=DenseIndex(index_type="HNSW"))


def test_factory_without_uri_names_the_setting(settings, clean_store_cache):
    # given
    settings.MILVUS_URI = ""

    # when
    with pytest.raises(ImproperlyConfigured) as error:
        get_vector_store(embedding_model=MODEL, dimension=DIM)

    # then
    assert "MILVUS_URI" in str(error.value)


def test_chunk_ids_lists_every_vector_of_a_kb_past_one_querys_limit(store):
    # given: more vectors than one Milvus query returns (16,384), and another KB's
    store.upsert_chunks([chunk(i, doc=i // 100) for i in range(1, 17_002)])
    store.upsert_chunks([chunk(50_000, kb=2, doc=1)])

    # when
    ids = store.chunk_ids(kb_id=1)

    # then
    assert len(ids) == 17_001
    assert ids[17_001] == 170 and 50_000 not in ids


def test_keyword_search_of_a_collection_that_holds_nothing_finds_nothing(store):
    # given: the collection exists but nothing was ever indexed (a first knowledge base)
    store.search_dense(kb_id=1, vector=unit(1.0), limit=5, documents=ANY_DOCUMENT)
    # when: Milvus has no BM25 statistics yet (average length 0)
    chunks = store.search_sparse(kb_id=1, query="报销流程", limit=5, documents=ANY_DOCUMENT)
    faqs = store.search_faq_sparse(kb_id=1, query="报销流程", limit=5)
    # then
    assert chunks == [] and faqs == []
