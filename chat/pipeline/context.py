"""Stage 5: context building — what the model may read, numbered.

`select_context` keeps, in this order: FAQ hits first (at most two), then document results;
each must pass the relevance floor (the share of the question's content terms it contains, on
jieba's IDF scale — see `engines.lexical`); tables go first when the question asks for figures;
duplicates (same semantic parent or same text) are dropped; count, per-item and total character
budgets apply. Numbers `[来源 N]` follow that order, so they are deterministic for the same
evidence. Nothing passing → insufficient context, with the reason in the trace.

`answer_request` hands the selection to the answerer as typed sources (`chat.answering`): the
knowledge is untrusted data, and text in documents that looks like our markup (`[来源 N]`,
`citation://`, `asset://`, the context tags) is defused before any answerer reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.utils.translation import gettext as _

from engines.glossary import is_foreign, rendering
from engines.lexical import Coverage, content_terms, coverage
from knowledge.locators import locator_label
from knowledge.models import KnowledgeBase
from retrieval.contracts import NO_ACTIVE_VERSION, FaqHit, RetrievalResult

from ..answering.focus import ItemFocus
from ..answering.markup import clip, defuse
from ..answering.ports import EvidenceJudge
from ..answering.request import AnswerRequest, AnswerSource, PastTurn, SourceImage
from .preparation import HistoryTurn, RetrievalPlan
from .rules import ContextRules



@dataclass(frozen=True)
class ContextItem:
    number: int
    kind: str  # "chunk" | "faq" | "web" (a web search's page, `result.from_web`)
    title: str
    text: str  # as the reader sees it (clipped to the per-item budget)
    relevance: Coverage
    result: RetrievalResult | None = None
    faq: FaqHit | None = None


@dataclass(frozen=True)
class ContextSelection:
    items: tuple[ContextItem, ...]
    sources: tuple[dict, ...]  # FAQ top 2 + documents top 5, what the client lists as sources
    top_score: float  # best relevance among candidates (evidence confidence input)
    insufficient_reason: str
    candidates: tuple[dict, ...]  # every candidate with its relevance and what happened to it
    question_terms: tuple[str, ...]

    def as_dict(self) -> dict:
        return {
            "context_count": len(self.items),
            "top_score": round(self.top_score, 4),
            "insufficient_context_reason": self.insufficient_reason,
            "question_terms": list(self.question_terms),
            "candidates": list(self.candidates),
        }


def select_context(
    *,
    question: str,
    faq_hits: tuple[FaqHit, ...],
    doc_results: tuple[RetrievalResult, ...],
    plan: RetrievalPlan,
    rules: ContextRules,
    empty_reason: str = "",
    judge: EvidenceJudge | None = None,
    answerer_judges: bool = False,
) -> ContextSelection:
    faq_texts = [f"常见问题：{hit.question}\n标准答案：{hit.answer}" for hit in faq_hits]
    # A chunk is read under its document title and headings ("员工手册 > 年假"), so they count.
    doc_texts = ["\n".join((r.document_title, *r.heading_path, r.content)) for r in doc_results]
    terms = content_terms(
        matching_question(question, evidence="\n".join(faq_texts + doc_texts)) if is_foreign(question) else question
    )
    floor = plan.min_context_score
    faq_scored = []
    for hit, text in zip(faq_hits, faq_texts, strict=True):
        cov = coverage(terms, text)
        faq_scored.append((hit, text, cov, max(hit.score, cov.score), hit.semantic))
    doc_scored = [
        (rank, result, coverage(terms, text), result.semantic_relevance)
        for rank, (result, text) in enumerate(zip(doc_results, doc_texts, strict=True))
    ]
    relevances = [r for *_, r, _ in faq_scored] + [cov.score for _, _, cov, _ in doc_scored]
    best = max(relevances, default=0.0)
    meant = any(meaning is not None and meaning >= rules.min_meaning_score for *_, meaning in doc_scored)
    # The question's most specific term must appear somewhere in the evidence, unless the best
    # evidence covers the question well anyway or means what it asks: "今天北京天气怎么样？"
    # against a KB that mentions 今天 and 北京 but never 天气 is not answerable, however much
    # else matches.
    covers = [cov for _, _, cov, _, _ in faq_scored] + [cov for _, _, cov, _ in doc_scored]
    missing = bool(covers) and not any(c.key_term_found for c in covers)
    # A model code or number the evidence never names is another product ("星河X9"), however
    # close the meaning: only a missing word may be excused by meaning.
    key_missing = missing and best < rules.key_term_exempt_score and (not meant or _is_code(covers[0].key_term))

    chosen: list[tuple] = []
    seen_keys: set[str] = set()
    seen_texts: set[str] = set()
    used_chars = 0

    def admit(kind, key, title, text, cov, result, faq) -> str:
        nonlocal used_chars
        text = clip(text, rules.max_context_doc_chars)
        if key in seen_keys or text in seen_texts:
            return "duplicate"
        if len(chosen) >= rules.final_context_top_n:
            return "over_count_budget"
        if used_chars + len(text) > rules.max_context_chars and chosen:
            return "over_total_budget"
        seen_keys.add(key)
        seen_texts.add(text)
        used_chars += len(text)
        chosen.append((kind, title, text, cov, result, faq))
        return "kept"

    def decided_by(relevance: float, meaning: float | None) -> str:
        """Which signal lets the candidate in: "words" (lexical coverage), "meaning" (the
        calibrated dense relevance), or "" (neither)."""
        if relevance >= floor:
            return "words"
        if meaning is not None and meaning >= rules.min_meaning_score:
            return "meaning"
        return ""

    def verdict_of(relevance: float, meaning: float | None) -> str:
        if key_missing:
            return "key_term_missing"
        return "relevant" if decided_by(relevance, meaning) else "below_relevance_floor"

    candidates: list[dict] = []
    faq_kept = 0
    for hit, text, cov, relevance, meaning in faq_scored:
        # Question-to-question closeness does not tell same-template questions apart
        # ("结婚可以休多少天假？" lies as near "陪产假有几天？" as the right one): FAQs get in by words.
        verdict = verdict_of(relevance, None)
        if verdict == "relevant" and faq_kept < rules.faq_context_top_n:
            title = f"常见问题：{hit.question}"
            verdict = admit("faq", f"faq:{hit.faq_id}", title, text, cov, None, hit)
            faq_kept += verdict == "kept"
        elif verdict == "relevant":
            verdict = "over_faq_budget"
        candidates.append({"kind": "faq", "faq_id": hit.faq_id, "relevance": round(relevance, 4),
                           "meaning": meaning, "decided_by": decided_by(relevance, None), "verdict": verdict})

    verdicts = {rank: verdict_of(cov.score, meaning) for rank, _, cov, meaning in doc_scored}
    # When nothing gets in by words or a chunk's meaning, a judge may still let evidence in;
    # never a model code the evidence does not name: that is another product's.
    open_to_judges = not (key_missing and _is_code(covers[0].key_term))
    chances: dict[int, float] = {}
    if judge is not None and terms and open_to_judges and not any(v == "relevant" for v in verdicts.values()):
        # The learned scorer reads the first results' sentences and rows; a source whose best
        # unit answers gets in.
        considered = doc_scored[: rules.final_context_top_n]
        sources = [
            AnswerSource(number=n, kind=_kind(result), title=source_title(result),
                         text=defuse(clip(result.content, rules.max_context_doc_chars)))
            for n, (_, result, _, _) in enumerate(considered, start=1)
        ]
        chances = {rank: chance for (rank, *_), chance in
                   zip(considered, judge.chances(question, sources), strict=True)}
        for rank, chance in chances.items():
            if chance >= judge.threshold:
                verdicts[rank] = "relevant"
    for_model: set[int] = set()
    if answerer_judges and open_to_judges and not any(v == "relevant" for v in verdicts.values()):
        # An answerer that writes reads the evidence and declines when nothing in it is related:
        # the first results near the question in meaning reach it, and it decides.
        for rank, _result, _cov, meaning in doc_scored[: rules.final_context_top_n]:
            if meaning is not None and meaning >= rules.model_min_meaning_score:
                verdicts[rank] = "relevant"
                for_model.add(rank)
    eligible = [item for item in doc_scored if verdicts[item[0]] == "relevant"]
    if plan.prefer_table:
        eligible.sort(key=lambda item: (0 if _is_table(item[1]) else 1, item[0]))
    for rank, result, cov, _meaning in eligible:
        key = f"doc:{result.parent_id or result.chunk_id}"
        verdicts[rank] = admit(_kind(result), key, source_title(result), result.content, cov, result, None)
    for rank, result, cov, meaning in doc_scored:
        candidates.append({
            "kind": _kind(result), "chunk_id": result.chunk_id, "document_id": result.document_id,
            "relevance": round(cov.score, 4), "meaning": meaning,
            **({"answer_chance": round(chances[rank], 4)} if rank in chances else {}),
            "decided_by": decided_by(cov.score, meaning) or (
                "evidence_scorer" if judge is not None and chances.get(rank, 0.0) >= judge.threshold
                else "meaning_for_model" if rank in for_model else ""),
            "key_term": cov.key_term, "key_term_found": cov.key_term_found, "verdict": verdicts[rank],
        })

    items = tuple(
        ContextItem(
            number=number, kind=kind, title=title, text=text, relevance=cov, result=result, faq=faq,
        )
        for number, (kind, title, text, cov, result, faq) in enumerate(chosen, start=1)
    )
    reason = ""
    if not items:
        reason = _insufficient_reason(terms, faq_hits, doc_results, key_missing, empty_reason)
    top = max(
        (max(item.faq.score, item.relevance.score) if item.faq else item.relevance.score for item in items),
        default=best,
    )
    return ContextSelection(
        items=items,
        sources=_sources(faq_hits, doc_results, plan),
        top_score=top,
        insufficient_reason=reason,
        candidates=tuple(candidates),
        question_terms=tuple(terms),
    )


def matching_question(question: str, *, evidence: str) -> str:
    """The question whose words are compared with the evidence: itself, or for an English
    question over Chinese evidence the Chinese words it names as that evidence writes them."""
    if is_foreign(question):
        return rendering(question, evidence) or question
    return question


def _is_code(term: str) -> bool:
    return any(ch.isdigit() or ("a" <= ch <= "z") for ch in term)


def faq_answer(text: str) -> str:
    """The answer part of a FAQ item's (clipped) text "常见问题：…\n标准答案：…"."""
    return text.split("\n标准答案：", 1)[1] if "\n标准答案：" in text else text


def _insufficient_reason(terms, faq_hits, doc_results, key_missing: bool, empty_reason: str) -> str:
    if empty_reason:
        return empty_reason
    if not terms:
        return "no_content_terms"
    if not faq_hits and not doc_results:
        return "no_candidates"
    return "key_term_missing" if key_missing else "below_relevance_floor"


def _kind(result: RetrievalResult) -> str:
    return "web" if result.from_web else "chunk"


def _is_table(result: RetrievalResult) -> bool:
    return result.content_type == "table" or "table" in result.content_types


def _sources(faq_hits, doc_results, plan: RetrievalPlan) -> tuple[dict, ...]:
    faqs = [
        {"kind": "faq", "faq_id": h.faq_id, "standard_question": h.question, "score": h.score}
        for h in faq_hits[:2]
    ]
    docs = [
        {"kind": _kind(r), "chunk_id": r.chunk_id, "document_id": r.document_id,
         "file_name": r.document_title, "score": r.score}
        for r in doc_results[:5]
    ]
    return tuple(docs + faqs if plan.prefer_table else faqs + docs)


def source_title(result: RetrievalResult) -> str:
    if result.from_web:
        # Said in the prompt as a FAQ's "常见问题：" is: the model reads where the text comes from.
        return defuse(f"网络来源：{result.document_title} · {result.site}").replace("\n", " ")
    parts = [result.document_title]
    heading = " > ".join(h for h in result.heading_path if h and h != result.document_title)
    if heading:
        parts.append(heading)
    label = locator_label(result.locator)
    if label:
        parts.append(label)
    return " · ".join(defuse(p).replace("\n", " ") for p in parts if p)


def insufficient_answer(kb: KnowledgeBase) -> str:
    """The one decline text, whether retrieval found nothing relevant or the model declined."""
    contact = kb.support_contact or _("知识库管理员")
    return _(
        "根据当前知识库无法确定该问题的答案：没有找到足够可靠的依据。如需进一步帮助，请联系%(contact)s。"
    ) % {"contact": contact}


def unpublished_answer(kb: KnowledgeBase) -> str:
    """The answer while no version of the knowledge base is published: the reader learns that the
    knowledge is not live yet, not that the question has no answer."""
    contact = kb.support_contact or _("知识库管理员")
    return _(
        "该知识库尚未发布任何版本，暂时无法回答问题。发布后即可提问；如需帮助，请联系%(contact)s。"
    ) % {"contact": contact}


def decline_answer(kb: KnowledgeBase, *, reason: str) -> str:
    """The decline text for why no evidence was selected (`ContextSelection.insufficient_reason`)."""
    return unpublished_answer(kb) if reason == NO_ACTIVE_VERSION else insufficient_answer(kb)


def contact_tail(kb: KnowledgeBase, answer: str) -> str:
    """What a model's decline lacks to say whom to ask: "" when it names the contact already."""
    contact = kb.support_contact or _("知识库管理员")
    if contact in answer:
        return ""
    return _("如需进一步帮助，请联系%(contact)s。") % {"contact": contact}


def answer_request(*, question: str, selection: ContextSelection, history: tuple[HistoryTurn, ...],
                   kb: KnowledgeBase, focus: ItemFocus) -> AnswerRequest:
    """What the answerer is given: the selected items as numbered, typed, defused sources."""
    return AnswerRequest(
        question=question, sources=tuple(_answer_source(item) for item in selection.items),
        history=tuple(PastTurn(question=turn.question, answer=turn.answer) for turn in history),
        kb_name=kb.name, contact=kb.support_contact or _("知识库管理员"), focus=focus,
    )


def _answer_source(item: ContextItem) -> AnswerSource:
    # A FAQ's question is its title; its answer (within the same budget) the body.
    body = faq_answer(item.text) if item.faq is not None else item.text
    images = tuple(SourceImage(asset.id, _caption(asset.caption)) for asset in item.result.assets) if item.result else ()
    return AnswerSource(number=item.number, kind=item.kind, title=defuse(item.title).replace("\n", " "),
                        text=defuse(body), images=images)


def _caption(caption: str) -> str:
    cleaned = re.sub(r"[\[\]\(\)\n\r]+", " ", defuse(caption or "")).strip()
    return (cleaned[:80] + "…") if len(cleaned) > 80 else (cleaned or _("图片"))
