"""Item confirmation end to end: a question about one product reads that product's facts only;
a question that fits several is asked back with them as choices (JSON, SSE, WebSocket, history),
and choosing one answers it; evaluation counts a clarifying question as neither answered nor
declined."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from websockets.sync.client import connect

from chat.contracts import ChatQuery, HitType, Requester
from chat.models import QueryTrace
from chat.pipeline.rag import RAGService
from evaluation.answers import judge, summarize_answers
from evaluation.models import EvalCase
from evaluation.services import CaseOutcome
from knowledge.documents import services as document_services
from knowledge.faqs import services as faq_services
from knowledge.items import services as item_services
from knowledge.models import ChunkItem, Item, KnowledgeBase, TagSource, Visibility
from tests.chat.conftest import live_chat_server, post_stream, publish_draft, ws_url
from tests.conftest import make_kb
from tests.fakes.provider_server import Answer, Fail

pytestmark = pytest.mark.django_db(transaction=True)

# One manual for the whole range, as vendors write them: the rows of its tables and some of its
# sentences are about one model each, and the models share most of their words.
MANUAL = """# 星河路由器用户手册

## 保修期限

| 型号 | 整机保修期 | 建议零售价 |
| --- | --- | --- |
| 星河X1 | 1 年 | 199 元 |
| 星河X3 | 2 年 | 399 元 |
| 星河X3 Pro | 3 年 | 699 元 |

## 恢复出厂设置

在通电状态下，用卡针按住机身背面的 RESET 孔 10 秒，指示灯变为蓝色闪烁后松开。

## 天线

星河X1 有 4 根外置天线。星河X3 有 6 根外置天线。星河X3 Pro 有 8 根外置天线。
"""
X3_PRO_MANUAL = """# 星河X3 Pro 快速入门

## 接口

星河X3 Pro 背面有 1 个 2.5G WAN 口和 1 个 USB 3.0 接口。
"""
ROUTERS = {"星河X1": ["X1"], "星河X3": ["X3"], "星河X3 Pro": ["X3Pro"]}


def product_kb(actor) -> KnowledgeBase:
    kb = make_kb(actor=actor, visibility=Visibility.PUBLIC)
    for name, aliases in ROUTERS.items():
        item_services.save_item(kb=kb, name=name, aliases=aliases, group="星河路由器", group_aliases=["星河 X 系列"],
                                actor=actor)
    uploads = [SimpleUploadedFile("手册.md", MANUAL.encode()), SimpleUploadedFile("X3Pro.md", X3_PRO_MANUAL.encode())]
    document_services.upload_documents(kb=kb, actor=actor, files=uploads)
    return publish_draft(kb, actor=actor)


@pytest.fixture
def products_kb(milvus, run_tasks, media_root, staff_user) -> KnowledgeBase:
    return product_kb(staff_user)


def ask(kb: KnowledgeBase, user, question: str, **extra):
    return RAGService().answer(query=ChatQuery(knowledge_base_id=kb.slug, question=question, **extra),
                               requester=Requester(user))


def item_id(kb: KnowledgeBase, name: str) -> int:
    return Item.objects.get(knowledge_base=kb, name=name).pk


# --- tagging --------------------------------------------------------------------------------------


def test_ingestion_tags_each_chunk_with_the_items_it_is_about(products_kb):
    # when: the documents were ingested with the catalog in place
    def items_of(words: str) -> set[str]:
        return set(ChunkItem.objects.filter(chunk__knowledge_base=products_kb, chunk__content__contains=words)
                   .values_list("item__name", flat=True))

    # then: a chunk about X3 Pro is not tagged X3 although "星河X3" is inside its name
    assert items_of("USB 3.0") == {"星河X3 Pro"}
    # then: a table of the whole range is about each model it lists
    assert items_of("整机保修期") == set(ROUTERS)
    # then: general text is about no item
    assert items_of("RESET") == set()


# --- rule A: one item -------------------------------------------------------------------------------


def test_a_question_naming_one_item_is_answered_with_its_facts_only(products_kb, staff_user):
    # when
    result = ask(products_kb, staff_user, "星河X3 Pro 的保修期是多久？")

    # then: X3 Pro's three years, not X3's two nor X1's one
    assert result.hit_type == HitType.RAG
    assert "3 年" in result.answer
    assert "2 年" not in result.answer and "1 年" not in result.answer
    items = result_trace(result)["items"]
    assert items["rule"] == "A" and [c["name"] for c in items["confirmed"]] == ["星河X3 Pro"]


def test_an_alias_is_confirmed_and_retrieval_reads_the_catalog_name(products_kb, staff_user):
    # when
    result = ask(products_kb, staff_user, "X3Pro 有几根天线？")

    # then
    assert "8 根" in result.answer and "6 根" not in result.answer
    assert result_trace(result)["items"]["question"].startswith("星河X3 Pro")


def test_a_question_naming_no_item_reads_everything(products_kb, staff_user):
    # when
    result = ask(products_kb, staff_user, "怎么恢复出厂设置？")

    # then
    assert "RESET" in result.answer
    assert result_trace(result)["items"]["rule"] == "none"


# --- rule C: asked back ---------------------------------------------------------------------------


def test_a_family_question_is_asked_back_with_exactly_its_items(products_kb, staff_user):
    # when
    result = ask(products_kb, staff_user, "星河路由器的保修期是多久？")

    # then: no guess, the three routers as choices, and no citation
    assert result.hit_type == HitType.CLARIFY
    assert result.clarify is not None
    assert sorted(c.name for c in result.clarify.choices) == sorted(ROUTERS)
    assert result.clarify.question == "星河路由器的保修期是多久？"
    assert result.clarify.mention == "星河路由器"
    assert result.citations == ()
    for name in ROUTERS:
        assert name in result.answer  # a client that shows no buttons still reads the choices
    assert result_trace(result)["items"]["rule"] == "C"


def test_a_family_question_a_faq_answers_for_the_whole_family_is_answered(products_kb, staff_user):
    # given: staff answered it once for every model
    faq_services.save_faq(kb=products_kb, question="星河路由器怎么恢复出厂设置？",
                          answer="按住 RESET 孔 10 秒，各型号相同。", actor=staff_user)

    # when
    result = ask(products_kb, staff_user, "星河路由器怎么恢复出厂设置？")

    # then
    assert result.hit_type == HitType.FAQ_EXACT
    assert "RESET" in result.answer


def test_a_faq_about_one_candidate_does_not_answer_a_family_question(products_kb, staff_user):
    # given: a FAQ about one model that shares the question's words
    faq_services.save_faq(kb=products_kb, question="星河X3 多少钱？", similar_questions=["星河X3 价格"],
                          answer="星河X3 建议零售价 399 元。", actor=staff_user)

    # when
    result = ask(products_kb, staff_user, "星河路由器的价格是多少钱？")

    # then: asked back, not answered with X3's price
    assert result.hit_type == HitType.CLARIFY


def test_choosing_a_candidate_asks_the_question_again_about_it(products_kb, staff_user):
    # given
    asked_back = ask(products_kb, staff_user, "星河路由器多少钱？")
    choice = next(c for c in asked_back.clarify.choices if c.name == "星河X3")

    # when
    result = ask(products_kb, staff_user, asked_back.clarify.question, item_ids=(choice.item_id,),
                 conversation_id=asked_back.conversation_id)

    # then
    assert result.hit_type == HitType.RAG
    assert "399" in result.answer and "699" not in result.answer and "199" not in result.answer
    items = result_trace(result)["items"]
    assert items["rule"] == "chosen" and items["question"] == "星河X3多少钱？"


def test_an_item_of_another_knowledge_base_chosen_is_ignored(products_kb, staff_user):
    # given: an item id the question's knowledge base does not have
    other = make_kb(actor=staff_user)
    foreign = item_services.save_item(kb=other, name="星河X3", actor=staff_user)

    # when
    result = ask(products_kb, staff_user, "星河路由器多少钱？", item_ids=(foreign.pk,))

    # then: asked back as if nothing had been chosen
    assert result.hit_type == HitType.CLARIFY


def test_a_follow_up_keeps_the_item_of_the_question_before(products_kb, staff_user):
    # given
    first = ask(products_kb, staff_user, "星河X1 的建议零售价是多少？")

    # when
    result = ask(products_kb, staff_user, "那天线呢？", conversation_id=first.conversation_id)

    # then
    assert "4 根" in result.answer and "8 根" not in result.answer


# --- transports -----------------------------------------------------------------------------------


def test_the_json_api_the_stream_and_the_socket_carry_the_choices(products_kb, staff_user, member_api):
    # when: the JSON API
    body = member_api.post("/api/chat", {"knowledge_base_id": products_kb.slug, "question": "星河路由器多少钱？"},
                           format="json").json()

    # then
    assert body["hit_type"] == "clarify"
    assert sorted(c["name"] for c in body["clarify"]["choices"]) == sorted(ROUTERS)

    with live_chat_server() as base_url:
        # when: the AI SDK stream
        response, parts = post_stream(base_url, {"knowledge_base_id": products_kb.slug, "question": "星河路由器多少钱？"})
        # when: the WebSocket
        with connect(ws_url(base_url), origin=base_url, proxy=None, open_timeout=30) as socket:
            socket.send(json.dumps({"type": "question", "knowledge_base_id": products_kb.slug,
                                    "question": "星河路由器多少钱？"}))
            events = []
            while not events or events[-1]["type"] not in ("end", "error"):
                events.append(json.loads(socket.recv(timeout=60)))
            assert events[-1]["type"] == "end", events[-1]
            x3 = next(c for c in events[-1]["clarify"]["choices"] if c["name"] == "星河X3")
            socket.send(json.dumps({"type": "question", "knowledge_base_id": products_kb.slug,
                                    "question": "星河路由器多少钱？", "item_ids": [x3["item_id"]],
                                    "conversation_id": events[0]["session_id"]}))
            chosen = []
            while not chosen or chosen[-1]["type"] not in ("end", "error"):
                chosen.append(json.loads(socket.recv(timeout=60)))

    # then: the stream has a data-clarify part right before data-answer
    types = [p["type"] for p in parts if isinstance(p, dict)]
    assert types.index("data-clarify") == types.index("data-answer") - 1
    clarify = next(p for p in parts if isinstance(p, dict) and p["type"] == "data-clarify")["data"]
    assert sorted(c["name"] for c in clarify["choices"]) == sorted(ROUTERS)
    # then: the socket sends a clarify event before the end, and the end carries it too
    assert [e["type"] for e in events][-2:] == ["clarify", "end"]
    assert events[-1]["hit_type"] == "clarify"
    assert chosen[-1]["hit_type"] == "rag" and "399" in chosen[-1]["answer"]


def test_history_reloads_the_clarifying_question(products_kb, member_api):
    # given
    first = member_api.post("/api/chat", {"knowledge_base_id": products_kb.slug, "question": "星河路由器多少钱？"},
                            format="json").json()

    # when
    conversation = member_api.get(f"/api/chat/conversations/{first['conversation_id']}").json()

    # then
    answer = conversation["messages"][-1]
    assert answer["evidence"]["hit_type"] == "clarify"
    assert answer["evidence"]["clarify"] == first["clarify"]


# --- staff's tags ------------------------------------------------------------------------------------


def test_a_chunk_staff_excluded_from_an_item_is_not_read_for_it(products_kb, staff_user):
    # given: staff say the antenna sentences are not about X3 Pro
    x3_pro = Item.objects.get(knowledge_base=products_kb, name="星河X3 Pro")
    antennas = ChunkItem.objects.filter(item=x3_pro, chunk__content__contains="外置天线").first().chunk
    item_services.tag_chunk(chunk=antennas, item=x3_pro, source=TagSource.EXCLUDED, actor=staff_user)

    # when
    result = ask(products_kb, staff_user, "星河X3 Pro 有几根天线？")

    # then
    assert "8 根" not in result.answer


# --- evaluation ----------------------------------------------------------------------------------


def test_evaluation_counts_a_clarifying_question_as_neither_answered_nor_declined(products_kb, staff_user):
    # given
    result = ask(products_kb, staff_user, "星河路由器多少钱？")
    case = EvalCase(key="A1", question="星河路由器多少钱？", answers=["399"], answerable=True)

    # when
    metrics = judge(case, result)
    summary = summarize_answers([CaseOutcome(case=case, gold=["399"], retrieved=[], gold_rank=None,
                                             metrics=metrics, latency_ms=1.0, answer=result.answer)])

    # then
    assert metrics == {"clarified": 1.0, "correct": 0.0}
    assert summary["clarified"] == 1
    assert "answerable_declined" not in summary and "containment" not in summary


def result_trace(result) -> dict:
    return QueryTrace.objects.get(trace_id=result.trace_id).full_details


# --- the chat model's reading --------------------------------------------------------------------


def test_the_chat_model_names_the_item_the_words_leave_open(products_kb, staff_user, openai_provider):
    # given: a question that describes a model without naming it; the model reads it as X3 Pro
    openai_provider.enqueue("openai.chat", Answer(text='{"item": "星河X3 Pro"}'))

    # when
    result = ask(products_kb, staff_user, "三频那款路由器保修多久？")

    # then: confirmed by the model's reading, scored against the catalog like a question
    items = result_trace(result)["items"]
    assert (items["rule"], items["source"], items["extracted"]) == ("A", "model", "星河X3 Pro")
    extraction = openai_provider.requests("openai.chat")[0].body
    assert "星河X3 Pro" in extraction["messages"][0]["content"]  # the catalog's names were offered


def test_a_failed_model_reading_falls_back_to_the_words(products_kb, staff_user, openai_provider):
    # given
    openai_provider.enqueue("openai.chat", Fail(status=500))

    # when
    result = ask(products_kb, staff_user, "三频那款路由器保修多久？")

    # then: no item, the answer still given, the failure on record
    assert result.hit_type != HitType.CLARIFY
    trace = result_trace(result)
    assert trace["items"]["rule"] == "none"
    assert "item_extraction_failed" in trace["degradations"]


def test_a_question_not_about_the_catalog_costs_no_model_reading(products_kb, staff_user, openai_provider):
    # when: a question about resetting, with no product word in it
    ask(products_kb, staff_user, "怎么恢复出厂设置？")

    # then: the chat model was asked for the answer only
    prompts = [r.body["messages"][-1]["content"] for r in openai_provider.requests("openai.chat")]
    assert prompts and not any("商品、型号或服务" in prompt for prompt in prompts)
