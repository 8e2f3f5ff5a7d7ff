"""The knowledge admin pages in words: codes, JSON and jargon are shown as a staff member reads them.

Each test renders a page with the test client and checks that the words are there and the raw
code, JSON or jargon is not (outside a collapsed "raw data" block where the page keeps it).
"""

from __future__ import annotations

import re

import pytest
from django.core.files.base import ContentFile
from django.urls import reverse

from knowledge.catalog import services as catalog_services
from knowledge.faqs import services as faq_services
from knowledge.models import Chunk, Document, DocumentAsset, DocumentTransition, VersionActivation
from tests.conftest import make_document, make_ready_version

pytestmark = pytest.mark.django_db

METADATA = {
    "warnings": ["第 2 页有一张图片过小，已跳过。"], "ocr_pages": [2, 3], "batch_documents": 1,
    "stage_seconds": {"parse": 0.092, "chunk": 0.002, "assets": 0.0, "embed": 1.5, "store": 0.003, "upsert": 0.008},
}


@pytest.fixture
def admin_client_logged_in(client, staff_user):
    client.force_login(staff_user)
    return client


def outside_raw_blocks(page: str) -> str:
    """The page without its collapsed raw-data blocks (which keep the stored JSON on purpose)."""
    return re.sub(r'<details class="rag-raw">.*?</details>', "", page, flags=re.S)


def test_the_document_page_words_its_metadata_worker_format_and_size(admin_client_logged_in, kb):
    # given: a processed slide deck, with the facts ingestion records
    document = make_document(kb)
    Document.objects.filter(pk=document.pk).update(
        file_type="pptx", size=34966, worker="vm:11033", metadata=METADATA,
        mime_type="application/vnd.openxmlformats-officedocument.presentationml.presentation",
    )
    DocumentTransition.objects.create(document=document, status="parsing", at=document.created_at, attempt=1, worker="vm:11033")

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_document_change", args=[document.pk])).content.decode()

    # then: labelled fields in words, each stage's time in ms or s
    shown = outside_raw_blocks(page)
    for words in ("处理信息", "各阶段耗时", "解析</th><td>92 ms", "向量化</th><td>1.5 s", "切分", "写入检索索引", "合计",
                  "警告", "第 2 页有一张图片过小，已跳过。", "文字识别（OCR）页", "第 2、3 页", "同批处理的文档", "仅此 1 个"):
        assert words in shown, words
    assert '"stage_seconds"' not in shown and "ocr_pages" not in shown
    # and: the stored JSON stays available, collapsed
    assert '<details class="rag-raw"><summary>原始数据（JSON）</summary>' in page and "stage_seconds" in page
    # and: the worker, the format and the size in words
    assert "主机 vm · 进程号 11033" in page and "vm:11033" not in page
    assert "pptx 演示文稿" in page and "34.1 KB（34,966 字节）" in page
    assert 'title="application/vnd.openxmlformats-officedocument.presentationml.presentation"' in page  # the MIME type, as a tooltip


def test_the_document_list_and_its_filter_name_formats_in_words(admin_client_logged_in, kb):
    # given
    document = make_document(kb)
    Document.objects.filter(pk=document.pk).update(file_type="docx")

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_document_changelist")).content.decode()

    # then
    assert '<td class="field-file_type_short">docx 文档</td>' in page
    assert "?file_type=docx" in page and ">docx 文档</a>" in page  # the filter offers the format in words


def test_an_image_is_titled_in_chinese_with_its_document(admin_client_logged_in, kb, media_root):
    # given
    asset = DocumentAsset(document=make_document(kb, title="访客 Wi-Fi 使用须知"), sha256="ab" * 32, page=2,
                          bbox=[2, 75.97, 223.69, 519.31, 451.7])
    asset.file.save("a.jpg", ContentFile(b"\xff\xd8\xff"), save=False)
    asset.save()

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_documentasset_change", args=[asset.pk])).content.decode()

    # then
    assert str(asset) == "「访客 Wi-Fi 使用须知」的第 1 张图片"
    assert "<h2>「访客 Wi-Fi 使用须知」的第 1 张图片</h2>" in page and " of document " not in page
    assert "第 2 页 (76, 224)–(519, 452)" in page and "[2, 75.97" not in page


def test_version_switches_say_publish_or_rollback_in_words(admin_client_logged_in, kb_with_two_published_versions, staff_user):
    # given: v1 published, v2 published, then rolled back to v1
    kb = kb_with_two_published_versions
    catalog_services.rollback_version(kb=kb, actor=staff_user, reason="v2 有误")
    first, second, rollback = VersionActivation.objects.filter(knowledge_base=kb).order_by("created_at", "id")

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_versionactivation_change", args=[rollback.pk])).content.decode()

    # then
    assert str(first) == f"{kb.slug}：发布 v1（此前没有生效版本）"
    assert str(second) == f"{kb.slug}：发布 v1 → v2"
    assert str(rollback) == f"{kb.slug}：回滚 v2 → v1"
    assert f"{kb.slug}：回滚 v2 → v1" in page and "(rollback)" not in page and "(activate)" not in page
    assert "切换后缓存版本" in page and "缓存世代" not in page


def test_the_chunk_pages_word_tokens_parent_block_headings_and_regions(admin_client_logged_in, kb):
    # given: two child chunks of one parent block on page 3
    document = make_document(kb, title="差旅制度")
    chunks = [
        Chunk.objects.create(
            document=document, knowledge_base=kb, ordinal=n, parent_id="p-7", content="住宿标准", token_count=12,
            heading_path=["差旅制度", "住宿"], locator={"page_start": 3},
            bboxes=[[3, 62.69, 167.64, 143.92, 184.53], [3, 62.69, 198.58, 517.89, 209.71]],
        )
        for n in range(2)
    ]

    # when
    listing = admin_client_logged_in.get(reverse("admin:knowledge_chunk_changelist")).content.decode()
    page = admin_client_logged_in.get(reverse("admin:knowledge_chunk_change", args=[chunks[1].pk])).content.decode()

    # then: the list counts tokens in words
    assert "词元数" in listing and "Token 数" not in listing
    # and: the page names the chunk, its parent block and where it sits, in words
    assert "「差旅制度」的分块 #1" in page and f"{document.pk}#1" not in page
    assert "所属父块" in page and "序号 0、1 的分块同属一个父块" in page and "父块 ID" not in page
    assert "查看同一父块的 2 个分块" in page and "p-7" in page  # the link lists the block's chunks
    assert "差旅制度 › 住宿" in page and '["差旅制度"' not in page
    assert "第 3 页 2 处" in outside_raw_blocks(page) and "[[3, 62.69" not in page
    assert "词元数" in page and "Token 数" not in page


def test_the_knowledge_base_pages_name_the_embedding_model_and_text_analysis_in_words(admin_client_logged_in, kb):
    # when
    listing = admin_client_logged_in.get(reverse("admin:knowledge_knowledgebase_changelist")).content.decode()
    page = admin_client_logged_in.get(reverse("admin:knowledge_knowledgebase_change", args=[kb.pk])).content.decode()

    # then: the list names the model as the new-knowledge-base form does, without its code
    assert '<td class="field-embedding_model_short">词法哈希</td>' in listing
    assert kb.embedding_model not in listing
    # and: the page says what the model and the text analysis do, each code as the tooltip
    assert "词法哈希（本地运行，只按字词匹配，不理解意思，适合测试）" in page
    assert '<span class="rag-code" title="terms-v1">中文分词 v1（' in page
    assert "子块大小（词元数）" in page and "（Token）" not in page


def test_the_cache_pages_and_the_switch_page_use_plain_words_with_help(admin_client_logged_in, kb_with_ready_version):
    # given
    kb = kb_with_ready_version
    namespace = kb.cache_namespace
    version = kb.versions.get()

    # when
    listing = admin_client_logged_in.get(reverse("admin:knowledge_cachenamespace_changelist")).content.decode()
    page = admin_client_logged_in.get(reverse("admin:knowledge_cachenamespace_change", args=[namespace.pk])).content.decode()
    confirm = admin_client_logged_in.post(
        reverse("admin:knowledge_knowledgebaseversion_changelist"), {"action": "activate", "_selected_action": [version.pk]},
    ).content.decode()

    # then
    for shown in (listing, page):
        assert "检索缓存分区" in shown and "缓存版本" in shown and "缓存版本在发布或回滚版本" in shown
        assert "缓存世代" not in shown and "缓存命名空间" not in shown and "kb:" not in shown
    assert f"{kb.name} 的检索缓存（第 {namespace.cache_epoch} 版）" in page
    assert "切换生效版本" in confirm and "检索缓存版本" in confirm
    assert "生效指针" not in confirm and "缓存世代" not in confirm


def test_faq_answers_are_rendered_from_their_markdown_by_the_answer_renderer(admin_client_logged_in, kb):
    # given: an answer with markdown and markup that must stay text
    faq = faq_services.save_faq(kb=kb, question="试用期多长？", answer="试用期 **3 个月**。<script>alert(1)</script>",
                            similar_questions=[], source_tag="", enabled=True, actor=None)

    # when
    listing = admin_client_logged_in.get(reverse("admin:knowledge_faq_changelist")).content.decode()
    page = admin_client_logged_in.get(reverse("admin:knowledge_faq_change", args=[faq.pk])).content.decode()

    # then: each answer goes to the renderer as a JSON data block, its text escaped until then
    for shown, element_id in ((listing, f"faq-answer-{faq.pk}"), (page, "faq-answer-saved")):
        assert f'data-answer-source="{element_id}"' in shown
        assert f'<script id="{element_id}" type="application/json">' in shown
        assert "试用期 **3 个月**" in shown  # the data block's markdown, and the text shown before it renders
        assert "<script>alert(1)</script>" not in shown and "&lt;script&gt;alert(1)&lt;/script&gt;" in shown
        assert "chat/admin_answer.js" in shown and "vendor/dompurify/purify.min.js" in shown
    assert "答案显示效果" in page and "column-answer_short" in listing


def test_a_new_faq_page_says_where_the_answer_will_show(admin_client_logged_in, kb):
    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_faq_add")).content.decode()

    # then
    assert "保存后在这里显示读者看到的答案。" in page


def test_a_chunk_outside_a_parent_block_says_so(admin_client_logged_in, kb):
    # given
    chunk = Chunk.objects.create(document=make_document(kb), knowledge_base=kb, ordinal=0, content="正文", token_count=2)

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_chunk_change", args=[chunk.pk])).content.decode()

    # then
    assert "无（检索命中时只提供这一块）" in page


def test_a_recorded_release_check_is_shown_as_a_table_not_json(admin_client_logged_in, kb, staff_user):
    # given: a publish whose release check was overridden
    activation = catalog_services.activate_version(version=make_ready_version(kb), actor=staff_user, reason="首次发布")
    VersionActivation.objects.filter(pk=activation.pk).update(release_check={
        "status": "done", "eval_set": "回归集", "lost": ["年假几天？"], "gained": [], "overridden": True,
        "refusal": "上线检查发现退步", "metrics": [{"name": "ndcg@10", "active": 0.9, "draft": 0.8, "delta_points": -10.0},
                                                  {"name": "hit@5", "label": "命中率@5", "active": 1.0, "draft": 1.0}],
    })

    # when
    page = admin_client_logged_in.get(reverse("admin:knowledge_versionactivation_change", args=[activation.pk])).content.decode()

    # then
    assert "检查未通过，已填写原因强制发布：上线检查发现退步" in page
    # a check recorded before metrics carried their words shows the code
    assert "<td>ndcg@10</td><td>0.9000</td><td>0.8000</td><td>-10.0</td>" in page and "年假几天？" in page
    assert '<td><span class="rag-code" title="hit@5">命中率@5</span></td>' in page
    assert '"overridden"' not in page


def test_a_failed_document_shows_its_message_with_the_code_as_tooltip(admin_client_logged_in, kb):
    # given
    document = make_document(kb, status="failed")
    Document.objects.filter(pk=document.pk).update(error_code="parse_failed", error_message="文件已损坏，无法读取。")

    # when
    listing = admin_client_logged_in.get(reverse("admin:knowledge_document_changelist")).content.decode()
    page = admin_client_logged_in.get(reverse("admin:knowledge_document_change", args=[document.pk])).content.decode()

    # then
    assert f'<span data-doc-error="{document.pk}" title="parse_failed · 文件已损坏，无法读取。">文件已损坏，无法读取。</span>' in listing
    assert '<span class="rag-code" title="parse_failed">文件已损坏，无法读取。</span>' in page
    assert "parse_failed:" not in listing
