"""Stage 2b: item confirmation — which product, model or service the question is about.

The question (after the follow-up rewrite, so "那 X3 Pro 呢？" reads as a whole question) is
scored against the knowledge base's item catalog (`knowledge.items.matching`): names, aliases
and codes written out score 1.0, near misses their similarity, a family named alone ("星河路由器")
the rules file's `group_score`. Where the words leave it open and the provider has a chat model,
the model is asked which item is meant and its answer is scored the same way. Then:

- rule A: one candidate at or above `high` → confirmed; retrieval reads only text about it;
- rule B: several at or above `high` → the ones named exactly win (a comparison names several,
  and all of them are confirmed); none exact → the best alone when it leads clearly, else C;
- rule C: candidates between `low` and `high` → a clarifying question listing them instead of a
  guess, once retrieval shows the best evidence is about some of them (a question about the
  whole family that the same text answers for all, or a FAQ staff wrote for the family, is
  answered);
- nothing at or above `low` → no item: retrieval as without a catalog.

A follow-up that names no item keeps the previous question's. An item the asker chose from a
clarifying question (`ChatQuery.item_ids`) is confirmed as chosen. The trace records the rule.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, replace

from django.utils.translation import gettext as _

from engines.ports import ChatMessage, ChatModel, ProviderError
from engines.glossary import is_foreign
from engines.lexical import normalise
from knowledge.items.matching import ItemCatalog, ItemScore

from ..answering.focus import ItemFocus
from ..contracts import Clarification

from .preparation import HistoryTurn
from .rules import ItemRules

logger = logging.getLogger(__name__)

RULE_CHOSEN = "chosen"
RULE_A = "A"
RULE_B = "B"
RULE_C = "C"
RULE_NONE = "none"
NO_CATALOG = "no_catalog"


@dataclass(frozen=True)
class ItemCandidate:
    item_id: int
    name: str
    score: float
    kind: str  # "exact" | "fuzzy" | "group" | "chosen"
    matched: str = ""

    def as_dict(self) -> dict:
        return {"item_id": self.item_id, "name": self.name, "score": round(self.score, 4), "kind": self.kind,
                "matched": self.matched}


@dataclass(frozen=True)
class ItemConfirmation:
    rule: str
    source: str  # "question" | "history" | "model" | "chosen" | ""
    confirmed: tuple[ItemCandidate, ...]
    candidates: tuple[ItemCandidate, ...]  # every scored item, best first
    question: str  # what retrieval reads: the question with a chosen item's name in it
    extracted: str = ""  # the model's reading of the item, when it was asked
    # The FAQ that would have answered directly but is about another item (or one candidate).
    faq_set_aside: int | None = None

    @property
    def item_ids(self) -> tuple[int, ...]:
        return tuple(c.item_id for c in self.confirmed)

    @property
    def unsure(self) -> bool:
        return self.rule == RULE_C

    @property
    def clarify_candidates(self) -> tuple[ItemCandidate, ...]:
        return self.candidates if self.rule == RULE_C else ()

    def as_dict(self) -> dict:
        return {
            "rule": self.rule,
            "source": self.source,
            "confirmed": [c.as_dict() for c in self.confirmed],
            "candidates": [c.as_dict() for c in self.candidates],
            "question": self.question,
            "extracted": self.extracted,
            "faq_set_aside": self.faq_set_aside,
        }


EXTRACT_PROMPT = (
    "下面是用户的问题和最近的对话。请判断问题问的是哪一个商品、型号或服务，"
    "只输出 JSON：{{\"item\": \"名称\"}}；问题没有指向具体商品时输出 {{\"item\": \"\"}}。\n"
    "可选的名称：{names}\n"
    "最近的对话：\n{history}\n"
    "问题：{question}"
)
_JSON_OBJECT = re.compile(r"\{.*\}", re.S)


class ModelItemExtractor:
    """The chat model's reading of which item is meant (JSON), for questions the words leave
    open."""

    def __init__(self, model: ChatModel, *, max_names: int = 60) -> None:
        self.model = model
        self.name = model.name
        self.max_names = max_names

    def extract(self, question: str, history: tuple[HistoryTurn, ...], *, names: tuple[str, ...] = ()) -> str | None:
        lines = "\n".join(f"问：{turn.question}" for turn in history[-2:]) or "（无）"
        prompt = EXTRACT_PROMPT.format(names="、".join(names[: self.max_names]) or "（未提供）", history=lines,
                                       question=question)
        text = self.model.complete([ChatMessage("user", prompt)], max_tokens=60, temperature=0.0)
        match = _JSON_OBJECT.search(text or "")
        if not match:
            return None
        try:
            value = json.loads(match.group(0)).get("item")
        except (json.JSONDecodeError, AttributeError):
            return None
        return value.strip()[:200] if isinstance(value, str) and value.strip() else None


def confirm_items(
    *,
    question: str,
    history: tuple[HistoryTurn, ...],
    follow_up: bool,
    catalog: ItemCatalog,
    rules: ItemRules,
    chosen_item_ids: tuple[int, ...] = (),
    extractor: ModelItemExtractor | None = None,
) -> tuple[ItemConfirmation, list[str]]:
    """The confirmation and any degradations it caused (`item_extraction_failed`)."""
    degradations: list[str] = []
    if not catalog:
        return ItemConfirmation(NO_CATALOG, "", (), (), question), degradations
    chosen = tuple(item for item in (catalog.item(i) for i in chosen_item_ids) if item is not None)
    if chosen:
        confirmed = tuple(ItemCandidate(item.id, item.name, 1.0, "chosen") for item in chosen)
        return ItemConfirmation(RULE_CHOSEN, "chosen", confirmed, confirmed,
                                with_item_named(question, catalog=catalog, names=[c.name for c in confirmed])), degradations

    source = "question"
    scores = catalog.score(question, group_score=rules.group_score, min_fuzzy=rules.min_fuzzy)
    if not _any_at(scores, rules.low) and follow_up and history:
        previous = history[-1].retrieval_query or history[-1].question
        carried = catalog.score(previous, group_score=rules.group_score, min_fuzzy=rules.min_fuzzy)
        if any(score.exact for score in carried):
            scores, source = tuple(s for s in carried if s.exact), "history"
    extracted = ""
    # The model is asked only when the words leave the item open: a question naming no item
    # exactly that is still about the catalog's kind of thing ("三频那款路由器"), names a family,
    # or holds a model code; most questions ("年假有几天？") cost no model call here.
    if extractor is not None and not any(s.exact for s in scores) and (scores or catalog.touches(question)):
        try:
            reading = extractor.extract(question, history, names=tuple(item.name for item in catalog.items))
        except ProviderError as exc:
            logger.warning("item extraction failed (%s), using the words alone", exc.code)
            degradations.append("item_extraction_failed")
            reading = None
        if reading:
            extracted = reading
            read = catalog.score(reading, group_score=rules.group_score, min_fuzzy=rules.min_fuzzy)
            if any(s.exact for s in read) or (read and (not scores or read[0].score > scores[0].score)):
                scores, source = read, "model"
    rule, confirmed = decide(scores, rules=rules)
    candidates = tuple(_candidate(s) for s in scores if s.score >= rules.low)[: rules.max_candidates]
    if source == "question" and confirmed and not is_foreign(question):
        question = with_names_written_out(question, catalog=catalog)
    return ItemConfirmation(rule, source if rule != RULE_NONE else "", tuple(_candidate(s) for s in confirmed),
                            candidates, question, extracted), degradations


def decide(scores: tuple[ItemScore, ...], *, rules: ItemRules) -> tuple[str, tuple[ItemScore, ...]]:
    """Rules A–C over scores sorted best first: the rule and the items it confirms."""
    high = tuple(s for s in scores if s.score >= rules.high)
    if len(high) == 1:
        return RULE_A, high
    if len(high) > 1:
        exact = tuple(s for s in high if s.exact)
        if exact:
            return RULE_B, exact
        if high[0].score - high[1].score >= rules.clear_lead:
            return RULE_B, high[:1]
        return RULE_C, ()
    if _any_at(scores, rules.low):
        return RULE_C, ()
    return RULE_NONE, ()


def focus_of(confirmation: ItemConfirmation | None, *, catalog: ItemCatalog | None, question: str) -> ItemFocus:
    """The turn's one item focus: the confirmed items (or the open candidates) over the catalog,
    and the model codes of the question the answerer reads."""
    focus = ItemFocus.of_question(question)
    if confirmation is None or catalog is None or not catalog:
        return focus
    return replace(focus, item_ids=confirmation.item_ids,
                     candidates=tuple(c.item_id for c in confirmation.clarify_candidates), catalog=catalog)


def with_item_named(question: str, *, catalog: ItemCatalog, names: list[str]) -> str:
    """The question with the chosen items' names where it named their family ("星河路由器多少钱？"
    → "星河X3 Pro多少钱？"), or in front when it named none."""
    label = "、".join(names)
    for mention in catalog.mentions(question):
        if mention.kind == "group":
            return question[: mention.start] + label + question[mention.end:]
    if any(mention.kind == "item" for mention in catalog.mentions(question)):
        return question
    return f"{label} {question}"


def with_names_written_out(question: str, *, catalog: ItemCatalog) -> str:
    """The question with each item it names by an alias or code named by its catalog name, as
    the documents write it ("X3Pro 多少钱" → "星河X3 Pro 多少钱")."""
    pieces, last = [], 0
    for mention in catalog.mentions(question):
        if mention.kind != "item" or len(mention.item_ids) != 1:
            continue
        item = catalog.item(mention.item_ids[0])
        if item is None or normalise(item.name) == normalise(mention.text):
            continue
        pieces.append(question[last:mention.start])
        pieces.append(item.name)
        last = mention.end
    return "".join(pieces) + question[last:] if pieces else question


def _any_at(scores: tuple[ItemScore, ...], floor: float) -> bool:
    return any(s.score >= floor for s in scores)


def _candidate(score: ItemScore) -> ItemCandidate:
    return ItemCandidate(score.item_id, score.name, score.score, score.kind, score.matched)


def clarify_answer(clarification: Clarification) -> str:
    """The clarifying question as text, the choices listed, for clients that show no buttons."""
    names = [choice.name for choice in clarification.choices]
    if clarification.mention:
        lead = _("“%(mention)s”对应多款产品，请问您想了解的是哪一款？") % {"mention": clarification.mention}
    else:
        lead = _("您的问题可能涉及多款产品，请问您想了解的是哪一款？")
    return lead + "\n\n" + "\n".join(f"- {name}" for name in names)
