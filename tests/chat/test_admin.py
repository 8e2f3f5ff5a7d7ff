"""Admin for answering: traces (read-only audit), conversations with their evidence, FAQ hits.

Pages go through the Django test client as staff; traces come from the real pipeline where the
pipeline can produce them, and from `chat.services` (the one writer) for states it only reaches
when something upstream fails (degradations, slow turns) or that need exact numbers (timings).
"""

from __future__ import annotations

import html
import json
import re
import uuid

import pytest
from django.urls import reverse

from chat import services
from chat.contracts import HIT_TYPES, ROUTES, AnswerFeatures, ChatQuery, HitType, Requester
from chat.models import ChatEvidence, Conversation, Message, QueryTrace
from chat.pipeline.confidence import (
    NOT_APPLICABLE,
    calculate_evidence_confidence,
    calculate_generation_confidence,
    combine_answer_confidence,
)
from chat.pipeline.rag import RAGService
from knowledge.faqs import services as faq_services
from knowledge.models import FAQ
from tests.chat.conftest import FAQ_QUESTION, GREETING, OFF_TOPIC_QUESTION, RAG_ANSWER_FACT, RAG_QUESTION
from tests.conftest import make_kb
from tests.retrieval.pages import visible_text

ANONYMOUS = Requester(user=None, session_key="admin-test-session")


@pytest.fixture
def staff_client(client, staff_user):
    client.force_login(staff_user)
    return client


def answered_turn(
    kb,
    *,
    question: str = "报销要多久？",
    answer: str = "30 天内提交。[来源 1](citation://1)",
    route: str = "retrieval",
    hit_type: str = "rag",
    level: str = "high",
    score: float = 0.9,
    total_ms: float = 120.0,
    first_token_ms: float | None = 80.0,
    stage_timings=(),
    degradations=(),
    citations=(),
    details=None,
    requester: Requester = ANONYMOUS,
    conversation: Conversation | None = None,
    confidence: dict | None = None,
) -> QueryTrace:
    """One finished turn written the way the pipeline writes it (`confidence`: the stored
    `answer_confidence`, else one made up from `level` and `score`)."""
    conversation, _ = services.start_turn(kb=kb, requester=requester, question=question, conversation=conversation)
    confidence = confidence if confidence is not None else {
        "score": score, "level": level, "label": {"high": "高", "medium": "中", "low": "低"}.get(level, ""),
        "reasons": ["retrieval_strong"],
        "evidence_confidence": {"score": 0.8, "level": "high", "label": "高"},
        "generation_verification": {"score": 0.95, "status": "verified", "reasons": ["all_lines_cited"],
                                    "signals": {"cited_lines": 1}},
        "signals": {"context_count": 1},
    } if level else {}
    trace = services.TraceRecord(
        trace_id=uuid.uuid4(), kb_version=1, question=question, route=route, hit_type=hit_type,
        confidence_score=score if level else None, confidence_level=level,
        stage_timings=list(stage_timings), first_token_ms=first_token_ms, total_ms=total_ms,
        degradations=list(degradations), details={},
    )
    services.complete_turn(
        conversation=conversation, answer=answer, trace=trace, user=requester.user,
        evidence=services.EvidenceRecord(
            route=route, hit_type=hit_type, intent={}, rewritten_query=question, citations=list(citations),
            retrieval_results=[], retrieval_trace=details if details is not None else {"plan": {"mode": "hybrid"}},
            answer_confidence=confidence,
        ),
    )
    return QueryTrace.objects.get(trace_id=trace.trace_id)


def listed(client, **params) -> set[int]:
    response = client.get(reverse("admin:chat_querytrace_changelist"), params)
    assert response.status_code == 200, response.content.decode()[:2000]
    return {trace.pk for trace in response.context["cl"].result_list}


def trace_page(client, trace: QueryTrace) -> str:
    response = client.get(reverse("admin:chat_querytrace_change", args=[trace.pk]))
    assert response.status_code == 200
    return response.content.decode()


def chart_bars(page: str) -> dict[str, tuple[float, float]]:
    """stage → (left %, width %) of the timing chart's bars."""
    bars = re.findall(r'data-stage="([^"]+)" data-width="[^"]+"\s+style="left:([\d.]+)%;width:([\d.]+)%"', page)
    return {stage: (float(left), float(width)) for stage, left, width in bars}


# --- access ------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["admin:chat_querytrace_changelist", "admin:chat_conversation_changelist"])
def test_chat_admin_is_refused_to_non_staff(client, member_user, kb, name):
    # given
    answered_turn(kb)
    client.force_login(member_user)
    # when
    response = client.get(reverse(name))
    # then
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


@pytest.mark.django_db
def test_trace_detail_is_refused_to_non_staff(client, member_user, kb):
    # given
    trace = answered_turn(kb)
    client.force_login(member_user)
    # when
    response = client.get(reverse("admin:chat_querytrace_change", args=[trace.pk]))
    # then
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


# --- traces from the real pipeline -------------------------------------------------------------


@pytest.fixture
def answered_chat_kb(chat_kb, staff_user):
    """`chat_kb` after four questions through the pipeline, one per way of answering."""
    rag = RAGService()
    requester = Requester(user=staff_user)
    for question in (GREETING, FAQ_QUESTION, RAG_QUESTION, OFF_TOPIC_QUESTION):
        rag.answer(query=ChatQuery(knowledge_base_id=chat_kb.slug, question=question), requester=requester)
    return chat_kb


def trace_of(question: str) -> QueryTrace:
    return QueryTrace.objects.get(question=question)


@pytest.mark.django_db(transaction=True)
def test_pipeline_traces_are_filtered_by_route_and_hit_type(staff_client, answered_chat_kb):
    # given
    greeting, faq, rag, off_topic = (trace_of(q) for q in (GREETING, FAQ_QUESTION, RAG_QUESTION, OFF_TOPIC_QUESTION))
    # then
    assert listed(staff_client) == {greeting.pk, faq.pk, rag.pk, off_topic.pk}
    assert listed(staff_client, route="direct_answer") == {greeting.pk}
    assert listed(staff_client, route="faq_exact") == {faq.pk}
    assert listed(staff_client, route="retrieval") == {rag.pk, off_topic.pk}
    assert listed(staff_client, hit_type="direct_answer") == {greeting.pk}
    assert listed(staff_client, hit_type="faq_exact") == {faq.pk}
    assert listed(staff_client, hit_type="rag") == {rag.pk}
    assert listed(staff_client, hit_type="insufficient_context") == {off_topic.pk}
    assert listed(staff_client, knowledge_base__id__exact=answered_chat_kb.pk) == {greeting.pk, faq.pk, rag.pk, off_topic.pk}


@pytest.mark.django_db(transaction=True)
def test_pipeline_trace_detail_charts_its_stages_and_links_to_the_conversation(staff_client, answered_chat_kb):
    # given
    trace = trace_of(RAG_QUESTION)
    # when
    page = trace_page(staff_client, trace)
    # then: one bar per recorded stage, in order and side by side on one axis
    bars = chart_bars(page)
    assert list(bars) == [t["stage"] for t in trace.stage_timings]
    assert {"route", "prepare", "faq_search", "doc_search", "context_build", "llm_generation", "citation_check"} <= set(bars)
    for label in ("查询路由", "检索准备", "FAQ 检索", "文档检索", "上下文构建", "生成", "引用核验"):
        assert label in page
    lefts = [left for left, _ in bars.values()]
    assert lefts == sorted(lefts)
    assert 'id="trace-first-token"' in page
    # the answer, its citations and the links
    assert RAG_ANSWER_FACT in page
    assert "产品手册" in page
    assert reverse("admin:chat_conversation_change", args=[trace.conversation_id]) in page
    assert reverse("admin:knowledge_knowledgebase_change", args=[answered_chat_kb.pk]) in page


@pytest.mark.django_db(transaction=True)
def test_pipeline_conversation_detail_shows_each_answer_with_its_evidence(staff_client, answered_chat_kb, staff_user):
    # given
    trace = trace_of(RAG_QUESTION)
    evidence = ChatEvidence.objects.get(message=trace.assistant_message)
    # when
    response = staff_client.get(reverse("admin:chat_conversation_change", args=[trace.conversation_id]))
    # then
    page = response.content.decode()
    assert response.status_code == 200
    assert RAG_QUESTION in page
    assert RAG_ANSWER_FACT in page
    assert "文档问答" in page  # the hit type of the answer
    cited = evidence.citations[0]
    assert html.escape(cited["title"]) in page
    assert html.escape(cited["spans"][0]["text"]) in page  # the supporting sentence
    assert reverse("admin:chat_querytrace_change", args=[trace.pk]) in page
    assert staff_user.username in staff_client.get(reverse("admin:chat_conversation_changelist")).content.decode()


# --- list filters ------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("route", ROUTES)
def test_route_filter_lists_only_that_route(staff_client, kb, route):
    # given
    traces = {r: answered_turn(kb, question=f"问题 {r}", route=r) for r in ROUTES}
    # then
    assert listed(staff_client, route=route) == {traces[route].pk}


@pytest.mark.django_db
@pytest.mark.parametrize("hit_type", HIT_TYPES)
def test_hit_type_filter_lists_only_that_hit_type(staff_client, kb, hit_type):
    # given
    traces = {h: answered_turn(kb, question=f"问题 {h}", hit_type=h) for h in HIT_TYPES}
    # then
    assert listed(staff_client, hit_type=hit_type) == {traces[hit_type].pk}


@pytest.mark.django_db
def test_confidence_filter_by_level_and_unassessed(staff_client, kb):
    # given
    high, medium, low = (answered_turn(kb, question=f"问题 {lv}", level=lv) for lv in ("high", "medium", "low"))
    unassessed = answered_turn(kb, question="失败的问题", level="")
    # then
    assert listed(staff_client, confidence_level="high") == {high.pk}
    assert listed(staff_client, confidence_level="medium") == {medium.pk}
    assert listed(staff_client, confidence_level="low") == {low.pk}
    assert listed(staff_client, confidence_level="none") == {unassessed.pk}


@pytest.mark.django_db
def test_confidence_badges_show_the_level_in_chinese(staff_client, kb):
    # given
    for level in ("high", "medium", "low"):
        answered_turn(kb, question=f"问题 {level}", level=level)
    # when
    page = staff_client.get(reverse("admin:chat_querytrace_changelist")).content.decode()
    # then
    badges = dict(re.findall(r'class="chat-confidence" data-level="(\w+)"[^>]*>(\S+) ', page))
    assert badges == {"high": "高", "medium": "中", "low": "低"}


@pytest.mark.django_db
def test_degradation_filter_by_presence_and_by_kind(staff_client, kb):
    # given
    clean = answered_turn(kb, question="正常")
    rerank = answered_turn(kb, question="重排失败", degradations=["rerank_failed"])
    channel = answered_turn(kb, question="通道失败", degradations=["query_rewrite_failed", "dense_failed:original", "rerank_failed"])
    hyde = answered_turn(kb, question="HyDE", degradations=["hyde_failed"])
    # then
    assert listed(staff_client, degradation="none") == {clean.pk}
    assert listed(staff_client, degradation="any") == {rerank.pk, channel.pk, hyde.pk}
    assert listed(staff_client, degradation="rerank_failed") == {rerank.pk, channel.pk}
    assert listed(staff_client, degradation="dense_failed") == {channel.pk}
    assert listed(staff_client, degradation="hyde_failed") == {hyde.pk}
    assert listed(staff_client, degradation="sparse_failed") == set()
    page = staff_client.get(reverse("admin:chat_querytrace_changelist")).content.decode()
    assert page.count('data-degraded="yes"') == 3 and page.count('data-degraded="no"') == 1


@pytest.mark.django_db
def test_degradation_filter_matches_a_code_at_any_position(staff_client, kb):
    # given: the code last in a long list
    codes = [f"custom_{i}_failed" for i in range(12)] + ["parent_expansion_failed"]
    late = answered_turn(kb, question="很多降级", degradations=codes)
    # then
    assert listed(staff_client, degradation="parent_expansion_failed") == {late.pk}
    assert listed(staff_client, degradation="custom_11_failed") == {late.pk}


@pytest.mark.django_db
def test_degraded_column_and_unknown_codes_offered_as_choices(staff_client, kb):
    # given
    answered_turn(kb, question="降级", degradations=["brand_new_failed"])
    # when
    response = staff_client.get(reverse("admin:chat_querytrace_changelist"))
    # then
    page = response.content.decode()
    assert "?degradation=brand_new_failed" in page
    assert "?degradation=rerank_failed" in page
    assert page.count('data-degraded="yes"') == 1


@pytest.mark.django_db
def test_slow_filter_uses_the_threshold_setting(staff_client, kb, settings):
    # given
    settings.RAG_SLOW_TRACE_MS = 500
    fast = answered_turn(kb, question="快", total_ms=499.9)
    edge = answered_turn(kb, question="正好", total_ms=500.0)
    slow = answered_turn(kb, question="慢", total_ms=4200.0)
    # then
    assert listed(staff_client, slow="yes") == {edge.pk, slow.pk}
    assert listed(staff_client, slow="no") == {fast.pk}
    assert "慢请求（≥ 500 毫秒）" in staff_client.get(reverse("admin:chat_querytrace_changelist")).content.decode()


@pytest.mark.django_db
def test_search_by_question_and_by_trace_id(staff_client, kb):
    # given
    vpn = answered_turn(kb, question="VPN 空闲多久断开？")
    other = answered_turn(kb, question="报销流程")
    # then
    assert listed(staff_client, q="VPN") == {vpn.pk}
    assert listed(staff_client, q=str(other.trace_id)) == {other.pk}
    assert listed(staff_client, q=str(other.trace_id)[:8]) == {other.pk}


@pytest.mark.django_db
def test_date_hierarchy_narrows_by_day(staff_client, kb):
    # given
    trace = answered_turn(kb)
    # The admin's date hierarchy counts days in the site's time zone (Asia/Shanghai), not UTC:
    # between 16:00 and 24:00 UTC the two days differ.
    from django.utils import timezone

    day = timezone.localtime(trace.created_at)
    # then
    assert listed(staff_client, created_at__year=day.year, created_at__month=day.month, created_at__day=day.day) == {trace.pk}
    assert listed(staff_client, created_at__year=day.year - 1) == set()


# --- trace detail ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_timing_chart_bars_are_proportional_to_elapsed_time(staff_client, kb):
    # given
    trace = answered_turn(
        kb, total_ms=1000.0, first_token_ms=700.0,
        stage_timings=[{"stage": "route", "elapsed_ms": 100.0}, {"stage": "doc_search", "elapsed_ms": 300.0},
                       {"stage": "llm_generation", "elapsed_ms": 500.0}, {"stage": "save_history", "elapsed_ms": 50.0}],
    )
    # when
    page = trace_page(staff_client, trace)
    # then
    assert chart_bars(page) == {
        "route": (0.0, 10.0), "doc_search": (10.0, 30.0), "llm_generation": (40.0, 50.0), "save_history": (90.0, 5.0),
    }
    assert re.search(r'id="trace-first-token" data-left="70.00"', page)
    assert page.count('class="trace-chart-first-token" style="left:70.00%"') == 4
    for stage, label in (("route", "查询路由"), ("doc_search", "文档检索"), ("llm_generation", "生成"), ("save_history", "保存")):
        assert f'<span class="trace-chart-label" title="{stage}">{label}</span>' in page


@pytest.mark.django_db
def test_timing_chart_scales_to_the_stages_when_they_exceed_the_total(staff_client, kb):
    # given: rounding can make the stages add up to more than the recorded total
    trace = answered_turn(
        kb, total_ms=90.0, first_token_ms=None,
        stage_timings=[{"stage": "route", "elapsed_ms": 50.0}, {"stage": "unknown_stage", "elapsed_ms": 50.0}],
    )
    # when
    page = trace_page(staff_client, trace)
    # then
    assert chart_bars(page) == {"route": (0.0, 50.0), "unknown_stage": (50.0, 50.0)}
    assert 'id="trace-first-token"' not in page


@pytest.mark.django_db
def test_trace_detail_shows_confidence_cache_degradations_errors_and_links(staff_client, kb):
    # given
    trace = answered_turn(
        kb, question="出差住宿标准？", level="medium", score=0.61,
        degradations=["rerank_failed", "sparse_failed:original"],
        citations=[{"number": 1, "kind": "chunk", "title": "员工手册", "text": "一线城市 600元/晚", "locator_label": "第 2 页",
                    "heading_path": ["员工手册", "差旅"], "score": 0.8, "cited": True,
                    "spans": [{"line": 0, "text": "一线城市 600元/晚", "text_start": 0, "text_end": 11}]}],
    )
    QueryTrace.objects.filter(pk=trace.pk).update(
        cache={"enabled": True, "hit_count": 1, "miss_count": 1,
               "events": [{"stage": "doc_retrieval", "hit": True, "source_type": "doc"},
                          {"stage": "query_embedding", "hit": False, "source_type": "embedding"}]},
        insufficient_reason="below_relevance_floor", model_name="qwen-plus", error_class="ProviderUnavailable",
        error_code="provider_unavailable",
    )
    # when
    page = trace_page(staff_client, trace)
    # then
    assert 'data-level="medium"' in page and "中 0.61" in page
    # codes in words, each code kept as the tooltip
    assert "证据置信度" in page and "生成核验" in page
    assert '<span id="trace-verification" title="verified">通过</span>' in page
    assert 'title="all_lines_cited">all_lines_cited</span>' in page  # a reason no table knows stays as it is
    assert 'title="doc_retrieval/doc:hit">文档检索结果：命中</span>' in page
    assert 'title="query_embedding/embedding:miss">问题向量：未命中</span>' in page
    assert "重排失败" in page and "关键词检索失败（原问题）" in page
    assert '<span title="below_relevance_floor">检索到的内容与问题相关度太低</span>' in page and "qwen-plus" in page
    assert "ProviderUnavailable" in page and '<span title="provider_unavailable">模型服务不可用</span>' in page
    assert "第 2 页" in page and "员工手册 › 差旅" in page
    assert 'id="trace-conversation-link"' in page
    assert reverse("admin:chat_conversation_change", args=[trace.conversation_id]) in page
    assert reverse("admin:knowledge_knowledgebase_change", args=[kb.pk]) in page
    assert "&quot;plan&quot;: {" in page  # the full trace (kept on the evidence), pretty-printed


# --- a trace is read-only ----------------------------------------------------------------------


@pytest.mark.django_db
def test_trace_admin_refuses_add_change_and_delete(staff_client, kb):
    # given
    trace = answered_turn(kb, question="原问题")
    change_url = reverse("admin:chat_querytrace_change", args=[trace.pk])
    # when
    add = staff_client.get(reverse("admin:chat_querytrace_add"))
    change = staff_client.post(change_url, {"question": "改过的问题", "status": "failed", "route": "faq_exact"})
    delete_page = staff_client.get(reverse("admin:chat_querytrace_delete", args=[trace.pk]))
    delete = staff_client.post(reverse("admin:chat_querytrace_delete", args=[trace.pk]), {"post": "yes"})
    bulk = staff_client.post(
        reverse("admin:chat_querytrace_changelist"),
        {"action": "delete_selected", "_selected_action": [trace.pk], "post": "yes"},
    )
    # then
    assert add.status_code == 403
    assert change.status_code == 403
    assert delete_page.status_code == 403
    assert delete.status_code == 403
    assert bulk.status_code in (200, 302)
    trace.refresh_from_db()
    assert (trace.question, trace.status, trace.route) == ("原问题", "completed", "retrieval")
    page = trace_page(staff_client, trace)
    assert 'name="_save"' not in page
    assert "deletelink" not in page
    assert 'name="action"' not in staff_client.get(reverse("admin:chat_querytrace_changelist")).content.decode()


# --- escaping ----------------------------------------------------------------------------------

SCRIPT = "<script>alert('x')</script>"


@pytest.mark.django_db
def test_html_in_questions_answers_citations_and_details_is_escaped(staff_client, kb):
    # given
    trace = answered_turn(
        kb, question=f"问题{SCRIPT}", answer=f"回答<img src=x onerror=alert(1)>{SCRIPT}",
        citations=[{"number": 1, "kind": "chunk", "title": f"标题{SCRIPT}", "text": f"原文{SCRIPT}",
                    "locator_label": "<b>页</b>", "spans": [{"line": 0, "text": f"句子{SCRIPT}"}]}],
        details={"note": f"</pre>{SCRIPT}"}, degradations=[f"x{SCRIPT}_failed"],
    )
    pages = {
        "trace list": staff_client.get(reverse("admin:chat_querytrace_changelist")).content.decode(),
        "trace": trace_page(staff_client, trace),
        "conversation list": staff_client.get(reverse("admin:chat_conversation_changelist")).content.decode(),
        "conversation": staff_client.get(reverse("admin:chat_conversation_change", args=[trace.conversation_id])).content.decode(),
    }
    # then
    for name, page in pages.items():
        assert "<script>alert" not in page, name
        assert "<img src=x" not in page, name
        assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page, name
    assert "&lt;/pre&gt;" in pages["trace"]
    assert "<b>页</b>" not in pages["trace"] and "<b>页</b>" not in pages["conversation"]


# --- conversations -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_conversation_list_shows_kb_owner_and_message_count(staff_client, kb, member_user):
    # given
    anonymous = answered_turn(kb, question="匿名的问题").conversation
    answered_turn(kb, question="追问", conversation=anonymous)
    signed_in = answered_turn(kb, question="会员的问题", requester=Requester(user=member_user)).conversation
    # when
    response = staff_client.get(reverse("admin:chat_conversation_changelist"))
    # then
    rows = {c.pk: c for c in response.context["cl"].result_list}
    model_admin = response.context["cl"].model_admin
    assert set(rows) == {anonymous.pk, signed_in.pk}
    assert model_admin.owner(rows[anonymous.pk]) == "匿名会话"
    assert model_admin.owner(rows[signed_in.pk]) == "member"
    assert model_admin.message_total(rows[anonymous.pk]) == 4
    assert model_admin.message_total(rows[signed_in.pk]) == 2
    page = response.content.decode()
    assert "匿名会话" in page and "member" in page and kb.name in page


@pytest.mark.django_db
def test_conversation_list_filters_by_kb_and_searches_titles(staff_client, kb):
    # given
    other_kb = make_kb()
    here = answered_turn(kb, question="年假怎么休").conversation
    there = answered_turn(other_kb, question="报销怎么走").conversation
    url = reverse("admin:chat_conversation_changelist")
    # then
    assert {c.pk for c in staff_client.get(url, {"knowledge_base__id__exact": kb.pk}).context["cl"].result_list} == {here.pk}
    assert {c.pk for c in staff_client.get(url, {"q": "报销"}).context["cl"].result_list} == {there.pk}


@pytest.mark.django_db
def test_conversation_detail_lists_messages_in_order_with_evidence_and_trace_links(staff_client, kb):
    # given
    first = answered_turn(
        kb, question="第一问", answer="第一答", hit_type="faq_exact", route="faq_exact", level="high",
        citations=[{"number": 1, "kind": "faq", "title": "年假有多少天？", "text": "15 天", "spans": []}],
    )
    second = answered_turn(
        kb, question="第二问", answer="第二答", conversation=first.conversation,
        citations=[{"number": 1, "kind": "chunk", "title": "员工手册", "text": "年假需提前三个工作日申请。",
                    "locator_label": "第 3 行", "spans": [{"line": 0, "text": "年假需提前三个工作日申请。"}]}],
    )
    # when
    response = staff_client.get(reverse("admin:chat_conversation_change", args=[first.conversation_id]))
    # then
    page = response.content.decode()
    assert response.status_code == 200
    positions = [page.index(text) for text in ("第一问", "第一答", "第二问", "第二答")]
    assert positions == sorted(positions)
    assert "FAQ 精确命中" in page and "文档问答" in page
    assert "年假有多少天？" in page and "员工手册" in page and "第 3 行" in page
    assert '<div class="chat-support">年假需提前三个工作日申请。</div>' in page
    assert page.count('class="message-trace-link"') == 2
    for trace in (first, second):
        assert reverse("admin:chat_querytrace_change", args=[trace.pk]) in page
    assert f'{reverse("admin:chat_querytrace_changelist")}?conversation__exact={first.conversation_id}' in page


@pytest.mark.django_db
def test_conversation_traces_link_lists_that_conversations_traces(staff_client, kb):
    # given
    first = answered_turn(kb, question="一")
    second = answered_turn(kb, question="二", conversation=first.conversation)
    answered_turn(kb, question="别的会话")
    # then
    assert listed(staff_client, conversation__exact=str(first.conversation_id)) == {first.pk, second.pk}


@pytest.mark.django_db
def test_conversation_messages_cannot_be_edited(staff_client, kb):
    # given
    trace = answered_turn(kb, question="原问题", answer="原回答")
    url = reverse("admin:chat_conversation_change", args=[trace.conversation_id])
    # when
    response = staff_client.post(url, {
        "title": "改过", "messages-TOTAL_FORMS": "2", "messages-INITIAL_FORMS": "2",
        "messages-0-content": "改过的问题", "messages-1-content": "改过的回答",
    })
    # then
    assert response.status_code == 403
    assert list(Message.objects.order_by("created_at", "id").values_list("content", flat=True)) == ["原问题", "原回答"]
    assert Conversation.objects.get().title == "原问题"
    assert staff_client.get(reverse("admin:chat_conversation_add")).status_code == 403


@pytest.mark.django_db
def test_staff_can_delete_a_conversation_and_its_trace_stays(staff_client, kb):
    # given
    trace = answered_turn(kb, question="请删除我的记录")
    # when
    response = staff_client.post(reverse("admin:chat_conversation_delete", args=[trace.conversation_id]), {"post": "yes"})
    # then
    assert response.status_code == 302
    assert not Conversation.objects.exists()
    assert not Message.objects.exists()
    assert not ChatEvidence.objects.exists()
    trace.refresh_from_db()
    assert trace.conversation_id is None and trace.assistant_message_id is None
    page = trace_page(staff_client, trace)
    assert "（会话已删除）" in page
    assert "回答消息已删除。" in page


# --- FAQ hit counts ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_faq_list_shows_most_used_first_and_sorts_and_filters_by_hit_count(staff_client, kb, staff_user):
    # given
    faqs = {
        hits: faq_services.save_faq(kb=kb, question=f"问题{hits}", answer="答案", actor=staff_user)
        for hits in (0, 5, 2)
    }
    for hits, faq in faqs.items():
        faq_services.record_faq_hits(faq_ids=[faq.pk] * hits)
    url = reverse("admin:knowledge_faq_changelist")
    cl = staff_client.get(url).context["cl"]
    column = cl.list_display.index("hit_count")  # the changelist's own column numbering

    def order(**params):
        return [faq.hit_count for faq in staff_client.get(url, params).context["cl"].result_list]

    # then
    assert order() == [5, 2, 0]
    assert order(o=str(column)) == [0, 2, 5]
    assert order(o=f"-{column}") == [5, 2, 0]
    assert order(hits="hit") == [5, 2]
    assert order(hits="never") == [0]
    page = staff_client.get(url).content.decode()
    assert f"?o={column}" in page or f"?o=-{column}" in page  # the 命中次数 header sorts
    assert FAQ.objects.get(pk=faqs[5].pk).hit_count == 5



@pytest.mark.django_db
def test_trace_pages_are_translated_to_english(staff_client, kb, settings):
    # given
    settings.RAG_SLOW_TRACE_MS = 3000
    trace = answered_turn(kb, stage_timings=[{"stage": "doc_search", "elapsed_ms": 10.0}], degradations=["rerank_failed"])
    # when
    detail = staff_client.get(reverse("admin:chat_querytrace_change", args=[trace.pk]), HTTP_ACCEPT_LANGUAGE="en")
    listing = staff_client.get(reverse("admin:chat_querytrace_changelist"), HTTP_ACCEPT_LANGUAGE="en")
    # then
    page = detail.content.decode()
    assert "Stage timings" in page and "Document search" in page and "Rerank failed" in page
    assert "阶段耗时" not in page
    assert "Slow requests (≥ 3000 ms)" in listing.content.decode()


# --- codes in words --------------------------------------------------------------------------------


def declined_confidence() -> dict:
    """`answer_confidence` of an answer declined for want of evidence, as the pipeline stores it."""
    evidence = calculate_evidence_confidence(
        hit_type=HitType.INSUFFICIENT_CONTEXT, retrieval_top_score=0.4008, context_count=0, source_count=7,
        intent_rule_score=0.84, intent_decision_score=0.84, history_rewrite_used=False,
    )
    return combine_answer_confidence(evidence, NOT_APPLICABLE).as_dict()


def partly_cited_confidence(answer: str) -> dict:
    evidence = calculate_evidence_confidence(
        hit_type=HitType.RAG, retrieval_top_score=0.9, context_count=1, source_count=1,
        intent_rule_score=0.84, intent_decision_score=0.84, history_rewrite_used=False,
    )
    generation = calculate_generation_confidence(
        answer=answer, context_numbers={1, 2}, context_texts=["星河X3 Pro 的整机保修期为 3 年。"],
        removed_citations=[], blocked_images=0, declined=False, question="星河X3 Pro 保修多久？",
    )
    features = AnswerFeatures(coverage=1.0, relevance=1.0, meaning=0.9287, shape=1.0, agreement=0.5)
    return combine_answer_confidence(evidence, generation, features=features).as_dict()


CACHE = {
    "enabled": True, "hit_count": 2, "miss_count": 2,
    "events": [{"stage": "epoch", "hit": True, "source_type": "l1"},
               {"stage": "faq_retrieval", "hit": False, "source_type": "faq"},
               {"stage": "query_embedding", "hit": False, "source_type": "embedding"},
               {"stage": "epoch", "hit": False, "source_type": "l3"}],
}
MARKDOWN_ANSWER = "- 星河X3 Pro 整机保修 **3 年**。[来源 1](citation://1)\n- 配件 1 年。[来源 2](citation://2)"
PAGE_CITATION = {"number": 1, "kind": "chunk", "title": "用户手册", "text": "保修期限", "cited": True, "score": 1.0,
                 "relevance": 1.0, "locator": {"page_start": 3, "page_end": 4}, "locator_label": "pages 3–4"}
SHEET_CITATION = {"number": 2, "kind": "chunk", "title": "产品规格表", "text": "| 星河X3 Pro | 3年 |", "score": 0.76,
                  "relevance": 1.0, "locator": {"sheet": "价格与保修", "range": "A2:F6"},
                  "locator_label": "sheet 价格与保修 A2:F6"}


@pytest.mark.django_db
def test_declined_trace_reads_in_words_with_the_codes_as_tooltips(staff_client, kb):
    # given: an answer declined for want of evidence, as the pipeline stores it
    trace = answered_turn(kb, question="今天北京天气怎么样？", hit_type="insufficient_context", level="low", score=0.18,
                          answer="根据当前知识库无法确定该问题的答案。", confidence=declined_confidence())
    QueryTrace.objects.filter(pk=trace.pk).update(intent="KNOWLEDGE_QUERY", insufficient_reason="below_relevance_floor",
                                                  cache=CACHE)
    # when
    page = trace_page(staff_client, trace)
    text = visible_text(page)
    # then: each code in words
    assert "知识查询" in text and "检索" in text and "信息不足" in text
    assert "检索到的内容与问题相关度太低" in text
    assert "原因: 依据不足" in text
    assert "不适用 · 核验分 1.00" in text and "没有生成回答，无需核验" in text
    for signal in ("标注来源的句子占比: —", "上下文条数: 0", "来源条数: 7", "结合上文改写: 否",
                   "最高检索分: 0.40", "生成核验结果: 不适用"):
        assert signal in text, signal
    for event in ("缓存版本（进程内存）：命中", "FAQ 检索结果：未命中", "问题向量：未命中", "缓存版本（数据库）：未命中"):
        assert event in text, event
    # and: the codes only where a developer looks (tooltips, the full JSON)
    for code in ("KNOWLEDGE_QUERY", "below_relevance_floor", "insufficient_context", "not_applicable",
                 "no_generation", "citation_coverage", "context_count", "=None", "epoch", "l1:hit", ":miss", " ms"):
        assert code not in text, code
    assert 'title="below_relevance_floor"' in page and 'title="not_applicable"' in page
    assert 'data-cache-event="epoch/l1:hit"' in page and 'data-signal="citation_coverage"' in page
    # the page's heading and breadcrumb word the route too
    assert f"{trace.trace_id} · 检索" in text and f"{trace.trace_id} retrieval" not in text


@pytest.mark.django_db
def test_answer_is_sent_as_markdown_with_citations_as_plain_markers_and_locators_in_words(staff_client, kb):
    # given: a document answer whose citations were stored by an English-speaking asker
    trace = answered_turn(kb, answer=MARKDOWN_ANSWER, citations=[PAGE_CITATION, SHEET_CITATION],
                          confidence=partly_cited_confidence(MARKDOWN_ANSWER))
    # when
    page = trace_page(staff_client, trace)
    text = visible_text(page)
    # then: until the browser renders it, the answer reads as text with "[来源 N]" markers
    assert "星河X3 Pro 整机保修 **3 年**。[来源 1]" in text and "citation://" not in text
    # and: its markdown goes along as data for the renderer, with what it may show
    source = json.loads(re.search(r'<script id="trace-answer-source" type="application/json">(.*?)</script>', page, re.S)[1])
    assert source == {"text": MARKDOWN_ANSWER, "citations": [1, 2], "assets": [], "asset_url": "/api/assets/"}
    assert 'data-answer-source="trace-answer-source"' in page
    assert "vendor/marked/marked.umd.js" in page and "vendor/dompurify/purify.min.js" in page and "chat/admin_answer.js" in page
    # and: locators, kinds, scores, reasons and signals in words
    assert "第 3–4 页" in text and "工作表 价格与保修 A2:F6" in text and "pages" not in text and "sheet " not in text
    assert "文档 · 第 3–4 页" in text and "排序分 1.000" in text and "chunk" not in text and "score" not in text
    assert "有检索依据" in text and "依据较少" in text and "rag_with_context" not in text
    for signal in ("有效引用: 来源 1、来源 2", "已移除的引用: 无",
                   "校准特征: 问题词覆盖 1.00、来源相关度 1.00、语义相关度 0.93、回答形式相符 1.00、引用一致 0.50"):
        assert signal in text, signal
    assert "features={" not in text and "valid_citation_numbers" not in text


@pytest.mark.django_db
def test_failed_trace_words_its_error_and_keeps_the_exception_class(staff_client, kb):
    # given
    trace = answered_turn(kb, degradations=["dense_failed:original", "history_rewrite_failed", "brand_new_failed"])
    QueryTrace.objects.filter(pk=trace.pk).update(status="failed", error_class="ProviderTimeout", error_code="provider_timeout")
    # when
    text = visible_text(trace_page(staff_client, trace))
    # then
    assert "模型服务超时" in text and "provider_timeout" not in text and "ProviderTimeout" in text
    assert "语义检索失败（原问题）" in text and "追问改写失败" in text
    assert "brand_new_failed" in text  # a code no table knows is shown as it is, not hidden


@pytest.mark.django_db
def test_trace_list_columns_and_filters_read_in_words(staff_client, kb):
    # given
    answered_turn(kb, question="报销要多久？", route="faq_exact", hit_type="faq_exact", level="high")
    answered_turn(kb, question="未知路由", route="some_new_route", hit_type="rag", level="medium")
    # when
    text = visible_text(staff_client.get(reverse("admin:chat_querytrace_changelist")).content.decode())
    # then
    assert "FAQ 精确匹配" in text and "FAQ 精确命中" in text and "文档问答" in text
    assert "some_new_route" in text  # an unknown stored code is shown as it is
    for choice in ("直接回答", "检索", "FAQ 直答", "信息不足", "高", "中", "低", "未评估", "语义检索失败", "上下文扩展失败"):
        assert choice in text, choice
    for code in ("faq_exact", "insufficient_context", "dense_failed", "verified"):
        assert code not in text, code


@pytest.mark.django_db
def test_trace_words_are_translated_to_english(staff_client, kb):
    # given
    trace = answered_turn(kb, question="今天北京天气怎么样？", hit_type="insufficient_context", level="low", score=0.18,
                          confidence=declined_confidence(), degradations=["sparse_failed:original"])
    QueryTrace.objects.filter(pk=trace.pk).update(intent="KNOWLEDGE_QUERY", insufficient_reason="below_relevance_floor",
                                                  cache=CACHE)
    # when
    detail = visible_text(staff_client.get(reverse("admin:chat_querytrace_change", args=[trace.pk]),
                                           HTTP_ACCEPT_LANGUAGE="en").content.decode())
    listing = visible_text(staff_client.get(reverse("admin:chat_querytrace_changelist"), HTTP_ACCEPT_LANGUAGE="en").content.decode())
    # then
    for words in ("Knowledge query", "Not applicable", "Cache epoch (process memory): hit", "Question vector: miss",
                  "Keyword search failed (original question)", "Context items"):
        assert words in detail, words
    assert "知识查询" not in detail and "问题向量" not in detail
    assert "Low 0.18" in listing and "Height" not in listing  # the confidence level, not the image height


@pytest.mark.django_db
def test_conversation_shows_answers_as_markdown_sources_and_words(staff_client, kb):
    # given
    trace = answered_turn(kb, answer=MARKDOWN_ANSWER, citations=[PAGE_CITATION], route="retrieval", hit_type="rag")
    # when
    response = staff_client.get(reverse("admin:chat_conversation_change", args=[trace.conversation_id]))
    page = response.content.decode()
    # then: the answer goes to the renderer, the question stays text
    message = trace.assistant_message
    assert f'data-answer-source="answer-source-{message.pk}"' in page
    assert f'<script id="answer-source-{message.pk}" type="application/json">' in page
    assert page.count("data-answer-source=") == 1
    assert "chat/admin_answer.js" in page
    text = visible_text(page)
    assert "[来源 1]" in text and "citation://" not in text
    assert "路由: 检索" in text and "文档 · 第 3–4 页" in text and "retrieval" not in text
