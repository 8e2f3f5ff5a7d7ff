"""Retrieval API on real components: ingestion, Milvus Lite, the local provider, the database."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import OperationalError
from django.urls import reverse

from knowledge import epochs
from knowledge.catalog import readiness
from knowledge.catalog import services as catalog_services
from knowledge.documents import services as document_services
from knowledge.models import Chunk, Document, DocumentStatus, KnowledgeBaseVersion, Visibility
from tests.conftest import make_kb

pytestmark = pytest.mark.django_db(transaction=True)

HANDBOOK = """# 员工手册

## 年假

入职满一年的员工每年享有 15 天带薪年假，年假需提前三个工作日在 OA 系统申请。

## 差旅住宿标准

| 城市级别 | 住宿标准 |
| --- | --- |
| 一线城市 | 600元/晚 |
| 其他城市 | 400元/晚 |
"""

PRODUCTS = """# 产品手册

## 星河X3

星河X3 是一款 Wi-Fi 6 路由器，推荐覆盖面积 120 平方米，保修期为 24 个月。

## IT 支持

首次使用请安装 VPN客户端，并使用公司邮箱账号登录。密码每 90 天需要修改一次。
"""

DRAFT_ONLY = "# 草稿\n\n## 年假调整\n\n草稿中的新规定：年假调整为 20 天，尚未发布。\n"


@pytest.fixture
def published_kb(milvus, run_tasks, media_root, staff_user):
    kb = make_kb(visibility=Visibility.INTERNAL)
    document_services.upload_documents(
        kb=kb, actor=staff_user,
        files=[SimpleUploadedFile("员工手册.md", HANDBOOK.encode()), SimpleUploadedFile("产品手册.md", PRODUCTS.encode())],
    )
    version = KnowledgeBaseVersion.objects.get(knowledge_base=kb)
    assert version.status == "ready"
    catalog_services.activate_version(version=version, actor=staff_user)
    kb.refresh_from_db()
    cache.clear()
    epochs.l1_epochs.clear()
    return kb


def search(client, kb, question, endpoint="search", **extra):
    return client.post(f"/api/retrieval/{endpoint}", {"knowledge_base_id": kb.slug, "question": question, **extra}, format="json")


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_search_finds_the_answer_in_every_mode(member_api, published_kb, mode):
    response = search(member_api, published_kb, "年假有多少天", mode=mode, top_k=3)
    assert response.status_code == 200, response.content
    results = response.json()
    assert isinstance(results, list)
    assert "15 天" in results[0]["content"]
    assert results[0]["document_title"] == "员工手册"
    channels = {source.split(":")[0] for result in results for source in result["rank_sources"]}
    assert channels == ({"dense", "sparse"} if mode == "hybrid" else {mode})


def test_explain_returns_results_and_trace(member_api, published_kb):
    body = search(member_api, published_kb, "年假有多少天", endpoint="explain", enable_rerank=True, enable_parent_expansion=True).json()
    assert body["results"][0]["matched_content"] in body["results"][0]["content"]
    trace = body["trace"]
    assert trace["query_variants"] == ["年假有多少天"]
    assert trace["version"] == 1
    assert trace["document_filter"] == "none"  # every document of the KB may answer
    assert trace["degradations"] == []
    stages = {t["stage"] for t in trace["stage_timings_ms"]}
    assert {"facts", "recall", "fusion", "parent_expansion", "assets"} <= stages
    assert trace["cache"]["enabled"] is True
    # the local provider has no reranker that helps: a documented no-op, said in the trace
    assert "rerank" not in stages
    assert "rerank_unavailable" in trace["notes"]
    assert trace["fusion"].startswith("convex(minmax")
    assert trace["embedding_model"] == published_kb.embedding_model
    assert 0.0 <= body["results"][0]["relevance"] <= 1.0


@pytest.mark.parametrize("question,expected", [
    ("星河X3", "星河X3 是一款"),
    ("600元/晚", "600元/晚"),
    ("VPN客户端", "VPN客户端"),
    ("90 天", "90 天需要修改"),
])
def test_chinese_bm25_finds_jieba_words(member_api, published_kb, question, expected):
    results = search(member_api, published_kb, question, mode="sparse", top_k=3).json()
    assert results, f"no sparse hit for {question}"
    assert expected in results[0]["matched_content"]


def test_draft_only_and_failed_documents_never_appear(member_api, published_kb, staff_user):
    # given: a draft document with vectors in Milvus and a failed one
    document_services.upload_documents(
        kb=published_kb, actor=staff_user,
        files=[SimpleUploadedFile("草稿.md", DRAFT_ONLY.encode()), SimpleUploadedFile("空.md", b"\n\n")],
    )
    draft_doc = Document.objects.get(title="草稿")
    assert draft_doc.status == DocumentStatus.READY
    # when
    results = search(member_api, published_kb, "年假调整为 20 天", mode="hybrid", top_k=10).json()
    # then
    assert draft_doc.pk not in {r["document_id"] for r in results}


def test_document_ids_restrict_the_search(member_api, published_kb):
    products = Document.objects.get(title="产品手册")
    results = search(member_api, published_kb, "密码", document_ids=[products.pk], top_k=5).json()
    assert results and {r["document_id"] for r in results} == {products.pk}
    none = search(member_api, published_kb, "年假", endpoint="explain", document_ids=[999999]).json()
    assert none["results"] == [] and none["trace"]["empty_reason"] == "document_ids_not_ready"


def test_kb_without_active_version_returns_empty_with_reason(member_api, milvus):
    kb = make_kb()
    body = search(member_api, kb, "年假", endpoint="explain").json()
    assert body["results"] == []
    assert body["trace"]["empty_reason"] == "no_active_version"


INVALID = [
    ({"question": ""}, "question"),
    ({"question": "\ufeff\u200b\u200d"}, "question"),  # a BOM and zero-width characters: nothing to read
    ({"question": "问" * 2001}, "question"),
    ({"top_k": 0}, "top_k"),
    ({"top_k": 51}, "top_k"),
    ({"top_k": 10, "candidate_k": 5}, "candidate_k"),
    ({"mode": "fuzzy"}, "mode"),
    ({"enable_rerank": "maybe"}, "enable_rerank"),
    ({"document_ids": list(range(1, 52))}, "document_ids"),
    ({"document_ids": ["abc"]}, "document_ids"),
]


@pytest.mark.parametrize("changes,field", INVALID, ids=[i[1] + str(n) for n, i in enumerate(INVALID)])
def test_invalid_requests_are_400_with_code(member_api, published_kb, changes, field):
    payload = {"knowledge_base_id": published_kb.slug, "question": "年假", **changes}
    response = member_api.post("/api/retrieval/search", payload, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_request"
    assert field in response.json()["errors"]


def test_unknown_kb_is_404(member_api, milvus):
    response = member_api.post("/api/retrieval/search", {"knowledge_base_id": "nope", "question": "年假"}, format="json")
    assert response.status_code == 404
    assert response.json()["code"] == "knowledge_base_not_found"


def test_no_access_is_404(anonymous_api, published_kb):
    assert search(anonymous_api, published_kb, "年假").status_code == 404


def test_facts_store_down_is_503_json(member_api, published_kb, monkeypatch):
    # given: the relational store fails while reading READY facts
    import retrieval.repository as repository

    def broken(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(repository, "ready_documents_of_active_version", broken)
    # when
    response = search(member_api, published_kb, "年假")
    # then
    assert response.status_code == 503
    assert response.json()["code"] == "facts_unavailable"
    assert "connection" not in response.json()["detail"]


def test_vector_store_down_is_503_json(member_api, published_kb, settings):
    from engines.milvus_store import reset_vector_store_cache

    settings.MILVUS_URI = "http://127.0.0.1:9"
    reset_vector_store_cache()
    response = search(member_api, published_kb, "年假", use_cache=False)
    reset_vector_store_cache()
    assert response.status_code == 503
    body = response.json()
    assert body["code"] == "retrieval_unavailable"
    assert {e["channel"] for e in body["channel_errors"]} == {"dense:original", "sparse:original"}


def test_cache_miss_hit_then_activation_bumps_epoch(member_api, published_kb, staff_user):
    def doc_cache_hits(body):
        return [e["hit"] for e in body["trace"]["cache"]["events"] if e["stage"] == "doc_retrieval"]

    first = search(member_api, published_kb, "星河X3 保修期", endpoint="explain").json()
    second = search(member_api, published_kb, "星河X3 保修期", endpoint="explain").json()
    assert doc_cache_hits(first) == [False]
    assert doc_cache_hits(second) == [True]
    assert second["results"] == first["results"]
    # when: a new version is published (same documents)
    draft = catalog_services.create_draft_version(kb=published_kb, actor=staff_user)
    readiness.mark_version_ready(version=draft)
    catalog_services.activate_version(version=draft, actor=staff_user)
    third = search(member_api, published_kb, "星河X3 保修期", endpoint="explain").json()
    # then
    assert doc_cache_hits(third) == [False]
    assert third["trace"]["cache_epoch"] == first["trace"]["cache_epoch"] + 1
    assert third["trace"]["version"] == 2


def test_manual_invalidation_endpoint(staff_api, member_api, published_kb):
    search(member_api, published_kb, "年假", endpoint="explain")
    response = staff_api.post("/api/admin/cache/invalidate", {"knowledge_base_id": published_kb.slug}, format="json")
    assert response.status_code == 200
    after = search(member_api, published_kb, "年假", endpoint="explain").json()
    assert [e["hit"] for e in after["trace"]["cache"]["events"] if e["stage"] == "doc_retrieval"] == [False]
    assert member_api.post("/api/admin/cache/invalidate", {"knowledge_base_id": published_kb.slug}, format="json").status_code == 403


def test_hit_test_admin_page_shows_results_and_trace(client, staff_user, published_kb):
    client.force_login(staff_user)
    url = reverse("hit-test", args=[published_kb.pk])
    assert client.get(url).status_code == 200
    response = client.post(url, {"question": "VPN客户端怎么登录", "mode": "hybrid", "top_k": 3, "candidate_k": 30,
                                 "enable_rerank": "on", "enable_parent_expansion": "on"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "首次使用请安装 VPN客户端" in html  # the matched chunk, not the echoed question
    # rank sources, stages, notes and counts in words (the codes stay as titles), locators not as dicts
    assert '<span class="ht-tag" title="sparse:original">关键词检索（原问题）</span>' in html
    assert "召回（各通道并行）" in html and "语义检索（原问题）" in html and 'title="recall"' in html
    assert "本地模型没有能提升效果的重排模型" in html
    assert "融合后" in html and "{'" not in html
    assert "第 " in html and " 行" in html


def test_hit_test_is_staff_only(client, member_user, published_kb):
    client.force_login(member_user)
    response = client.get(reverse("hit-test", args=[published_kb.pk]))
    assert response.status_code == 302


def test_kb_whose_embedding_model_the_deployment_cannot_serve_is_503(member_api, published_kb):
    # given: the KB was built with a remote model, the deployment runs the local provider
    from knowledge.models import KnowledgeBase

    KnowledgeBase.objects.filter(pk=published_kb.pk).update(embedding_model="text-embedding-v4", embedding_dimension=1024)
    # when
    response = search(member_api, published_kb, "年假")
    # then
    assert response.status_code == 503
    assert response.json()["code"] == "retrieval_misconfigured"


def test_asset_bytes_follow_document_visibility(client, member_user, staff_user, milvus, run_tasks, tmp_path):
    # given: a published PDF with an image, and a draft-only copy of its asset's document
    from demo.build import build_demo_corpus
    from knowledge.models import DocumentAsset

    manual = next(p for p in build_demo_corpus(tmp_path) if p.name == "product_manual.pdf")
    kb = make_kb(visibility=Visibility.INTERNAL)
    document_services.upload_documents(kb=kb, actor=staff_user, files=[SimpleUploadedFile(manual.name, manual.read_bytes())])
    asset = DocumentAsset.objects.get()
    url = f"/api/assets/{asset.pk}"
    client.force_login(member_user)
    # when / then: not published yet → hidden from readers, visible to staff
    assert client.get(url).status_code == 404
    client.force_login(staff_user)
    assert client.get(url).status_code == 200  # staff see images of documents in preparation
    client.force_login(member_user)
    catalog_services.activate_version(version=KnowledgeBaseVersion.objects.get(knowledge_base=kb), actor=staff_user)
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "image/jpeg"
    assert b"".join(response.streaming_content)[:3] == b"\xff\xd8\xff"
    # and: the row without its bytes is a clean 404, not a crash
    asset.file.storage.delete(asset.file.name)
    missing = client.get(url)
    assert missing.status_code == 404
    assert missing.json()["code"] == "asset_file_missing"
    client.logout()
    assert client.get(url).status_code == 404  # anonymous on an internal KB


def test_not_in_filter_is_pushed_down_when_it_is_shorter(member_api, published_kb, staff_user):
    # given: three READY published documents and one that is only in a draft
    document_services.upload_documents(kb=published_kb, actor=staff_user, files=[SimpleUploadedFile("第三.md", "# 报销\n\n报销需在 30 天内提交。".encode())])
    draft = KnowledgeBaseVersion.objects.get(knowledge_base=published_kb, status="ready", number=2)
    catalog_services.activate_version(version=draft, actor=staff_user)
    document_services.upload_documents(kb=published_kb, actor=staff_user, files=[SimpleUploadedFile("草稿.md", DRAFT_ONLY.encode())])
    # when
    body = search(member_api, published_kb, "年假", endpoint="explain", top_k=10).json()
    # then
    assert body["trace"]["document_filter"] == "not_in"
    titles = {r["document_title"] for r in body["results"]}
    assert "员工手册" in titles and "草稿" not in titles


def test_knowledge_bases_never_see_each_others_chunks(member_api, published_kb, staff_user):
    other = make_kb(visibility=Visibility.INTERNAL)
    document_services.upload_documents(kb=other, actor=staff_user, files=[SimpleUploadedFile("别的.md", "# 年假\n\n另一家公司的年假是 5 天。".encode())])
    catalog_services.activate_version(version=KnowledgeBaseVersion.objects.get(knowledge_base=other), actor=staff_user)
    results = search(member_api, published_kb, "年假 5 天", top_k=10).json()
    assert results and "另一家公司" not in "".join(r["content"] for r in results)


def doc_cache_hits(body):
    return [e["hit"] for e in body["trace"]["cache"]["events"] if e["stage"] == "doc_retrieval"]


def test_reindexing_a_published_document_retires_cached_results(member_api, published_kb, staff_user):
    # given: a cached result that cites the handbook's chunks
    first = search(member_api, published_kb, "年假有多少天", endpoint="explain").json()
    assert doc_cache_hits(search(member_api, published_kb, "年假有多少天", endpoint="explain").json()) == [True]
    handbook = Document.objects.get(knowledge_base=published_kb, title="员工手册")
    old_chunks = set(Chunk.objects.filter(document=handbook).values_list("pk", flat=True))

    # when: the document is re-indexed in place (new chunk ids), e.g. after a parser upgrade
    document_services.requeue_documents(document_ids=[handbook.pk])
    epochs.l1_epochs.clear()  # other processes follow within the L1 TTL; this one at once
    after = search(member_api, published_kb, "年假有多少天", endpoint="explain").json()

    # then: not served from the cache, and no result names a chunk that no longer exists
    assert doc_cache_hits(after) == [False]
    assert {r["chunk_id"] for r in first["results"]} & old_chunks
    assert not {r["chunk_id"] for r in after["results"]} & old_chunks
    live = set(Chunk.objects.values_list("pk", flat=True))
    assert {r["chunk_id"] for r in after["results"]} <= live


def test_a_degraded_result_is_not_cached(member_api, published_kb, monkeypatch):
    # given: the sparse channel is down for one request
    from engines.milvus_store import MilvusVectorStore
    from engines.ports import VectorStoreUnavailable

    healthy = MilvusVectorStore.search_sparse

    def down(self, **kwargs):
        raise VectorStoreUnavailable("sparse down")

    monkeypatch.setattr(MilvusVectorStore, "search_sparse", down)
    degraded = search(member_api, published_kb, "VPN 怎么连", endpoint="explain").json()
    monkeypatch.setattr(MilvusVectorStore, "search_sparse", healthy)

    # when
    recovered = search(member_api, published_kb, "VPN 怎么连", endpoint="explain").json()
    again = search(member_api, published_kb, "VPN 怎么连", endpoint="explain").json()

    # then: the healthy request computed its own result, which is the one cached
    assert "sparse_failed:original" in degraded["trace"]["degradations"]
    assert doc_cache_hits(recovered) == [False]
    assert recovered["trace"]["degradations"] == []
    assert doc_cache_hits(again) == [True]


def test_document_ids_beyond_the_key_range_are_a_validation_error(member_api, kb):
    # when: an id no 64-bit key can hold (it reached the facts query and failed there)
    response = search(member_api, kb, "年假", document_ids=[2**70])
    # then
    assert response.status_code == 400
    assert "document_ids" in response.json()["errors"]
