"""The turn's one item focus: one definition of "about another item" for every stage."""

from __future__ import annotations

from chat.answering.extractive.composer import ExtractiveAnswerer
from chat.answering.focus import ItemFocus
from chat.answering.request import AnswerRequest, AnswerSource
from chat.pipeline.items import ItemCandidate, ItemConfirmation, RULE_A, RULE_C, focus_of
from knowledge.items.matching import CatalogItem, ItemCatalog
from retrieval.contracts import FaqHit

X3, X3_PRO, ROUTER_CARD = 1, 2, 3
CATALOG = ItemCatalog([
    CatalogItem(X3, "星河X3", group="星河路由器"),
    CatalogItem(X3_PRO, "星河X3 Pro", aliases=("X3Pro",), group="星河路由器"),
    # An item whose name holds no model code: only the catalog knows it.
    CatalogItem(ROUTER_CARD, "畅联流量卡", aliases=("流量卡",)),
])


def confirmed(*item_ids: int) -> ItemConfirmation:
    chosen = tuple(ItemCandidate(i, CATALOG.item(i).name, 1.0, "exact") for i in item_ids)
    return ItemConfirmation(RULE_A, "question", chosen, chosen, "")


def open_between(*item_ids: int) -> ItemConfirmation:
    candidates = tuple(ItemCandidate(i, CATALOG.item(i).name, 0.7, "fuzzy") for i in item_ids)
    return ItemConfirmation(RULE_C, "question", (), candidates, "")


def faq_hit(question: str, answer: str, faq_id: int = 1) -> FaqHit:
    return FaqHit(faq_id=faq_id, question=question, matched_question=question, answer=answer, score=0.9)


def test_a_confirmed_item_reads_the_catalog_and_codes_alike():
    # given: a question confirmed to be about X3 Pro
    focus = focus_of(confirmed(X3_PRO), catalog=CATALOG, question="星河X3 Pro 的保修期是多久？")
    # then: text naming only X3 is about another item, text naming X3 Pro or nothing is not
    assert focus.about_others("星河X3 整机保修 2 年。")
    assert not focus.about_others("X3Pro 整机保修 3 年。")
    assert not focus.about_others("所有产品均享受七天无理由退货。")
    # and a catalog item with no model code in its name is another item too
    assert focus.about_others("畅联流量卡每月 30GB。")
    # and shared text keeps only what is about the asked item
    assert focus.focused("| 型号 | 保修 |\n| 星河X3 | 2年 |\n| 星河X3 Pro | 3年 |") == (
        "| 型号 | 保修 |\n| 星河X3 Pro | 3年 |")


def test_without_a_catalog_the_question_s_model_codes_decide():
    # given: no catalog
    focus = focus_of(None, catalog=None, question="星河X3 最多能连多少台设备？")
    # then
    assert focus.codes == frozenset({"x3"})
    assert focus.about_others("星河X3 Pro 最多可连接 128 台设备。")
    assert not focus.about_others("星河X3 最多可连接 64 台设备。")
    assert not focus.about_others("设备数量以实际环境为准。")
    assert focus.item_ids == ()


def test_faqs_about_other_items_are_set_aside_and_answers_focused():
    # given
    focus = focus_of(confirmed(X3_PRO), catalog=CATALOG, question="星河X3 Pro 的保修期是多久？")
    hits = (faq_hit("星河X3 的保修期是多久？", "2 年。", 1),
            faq_hit("路由器保修期是多久？", "星河X3 2 年；星河X3 Pro 3 年。", 2))
    # when
    kept = focus.faq_hits(hits)
    # then
    assert [hit.faq_id for hit in kept] == [2]
    assert "星河X3 2 年" not in kept[0].answer and "3 年" in kept[0].answer


def test_while_the_item_is_open_a_faq_about_one_candidate_is_no_answer():
    # given
    focus = focus_of(open_between(X3, X3_PRO), catalog=CATALOG, question="星河那款路由器保修多久？")
    # then
    assert focus.unsure
    assert not focus.admits_faq("星河X3 Pro 的保修期是多久？")
    assert focus.admits_faq("星河X3 和 X3 Pro 的保修期是多久？")
    assert focus.names_candidate("星河X3 整机保修 2 年。")
    assert not focus.names_candidate("保修从购买之日起算。")


def test_the_answerer_reads_the_focus_it_is_given():
    # given: a source whose only sentence about the asked figure names a catalog item that is
    # not the confirmed one, though it holds no model code the question names
    sources = (AnswerSource(number=1, kind="chunk", title="产品手册",
                            text="畅联流量卡的保修期是 1 年。\n退货须在七天内申请。"),)
    question = "这款的保修期是多久？"
    answerer = ExtractiveAnswerer()
    # when: the question's focus is X3 Pro (confirmed from the conversation)
    focused = answerer.answer(AnswerRequest(
        question=question, sources=sources,
        focus=focus_of(confirmed(X3_PRO), catalog=CATALOG, question=question)))
    unfocused = answerer.answer(AnswerRequest(question=question, sources=sources))
    # then: the other item's sentence answers only a question with no focus
    assert "1 年" in unfocused
    assert "1 年" not in focused


def test_no_focus_is_about_everything():
    focus = ItemFocus()
    assert not focus.about_others("星河X3 整机保修 2 年。")
    assert focus.focused("星河X3 整机保修 2 年。") == "星河X3 整机保修 2 年。"
    assert focus.admits_faq("星河X3 的保修期是多久？")
