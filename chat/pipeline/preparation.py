"""Stage 2: retrieval preparation (`prepare_retrieval`).

History (the last N finished turns) → follow-up detection → rewrite of an elliptical follow-up
into a standalone question → intent → the retrieval plan → query variants (the question
retrieval runs on first; a model rewrite inside retrieval may add one more).

Follow-ups are rewritten by the chat model where the provider has a generative one; the `local`
provider (and any model failure) uses a deterministic rule: the previous question's subject is
carried into the follow-up ("年假有多少天？" + "那审批呢？" → "年假的审批？"), or a term of the same
kind is swapped into the previous question ("星河X3 的保修期是多久？" + "那 X5 呢？" → "星河X5 的保修期
是多久？"; "婚假有几天？" after "年假有几天？").
"""

from __future__ import annotations

import logging
import re
import unicodedata
from dataclasses import asdict, dataclass
from typing import Protocol

from django.conf import settings

from chat.contracts import ChatOptions, IntentResult
from engines.lexical import content_terms, model_code_spans, normalise
from engines.ports import ChatMessage, ChatModel, ProviderError
from retrieval.contracts import MetadataFilter

from .rules import Rules

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class HistoryTurn:
    question: str
    answer: str
    retrieval_query: str  # what retrieval ran on for that question (after its own rewrite)


@dataclass(frozen=True)
class RetrievalPlan:
    faq_top_k: int
    faq_candidate_k: int
    doc_top_k: int
    candidate_k: int
    mode: str
    enable_query_rewrite: bool
    enable_rerank: bool
    enable_parent_expansion: bool
    document_ids: tuple[int, ...] | None
    prefer_table: bool
    min_context_score: float
    faq_direct_threshold: float
    filters: tuple[MetadataFilter, ...] = ()  # the question's metadata filters, for document retrieval
    enable_hyde: bool = False
    dynamic_top_k: bool = False  # cut the reranked results at a score cliff (only with rerank)

    def as_dict(self) -> dict:
        data = asdict(self)
        data["document_ids"] = list(self.document_ids) if self.document_ids is not None else None
        data["filters"] = [f.as_dict() for f in self.filters]
        return data


@dataclass(frozen=True)
class Preparation:
    history: tuple[HistoryTurn, ...]
    follow_up: bool
    rewritten_query: str
    history_rewrite_used: bool
    rewrite_method: str  # none | rule | model | rule_after_model_failure
    intent: IntentResult
    plan: RetrievalPlan
    variants: tuple[str, ...]

    def as_dict(self) -> dict:
        return {
            "history_turns": len(self.history),
            "follow_up": self.follow_up,
            "rewritten_query": self.rewritten_query,
            "history_rewrite_used": self.history_rewrite_used,
            "rewrite_method": self.rewrite_method,
            "intent": self.intent.as_dict(),
            "plan": self.plan.as_dict(),
            "query_variants": list(self.variants),
        }


class FollowUpRewriter(Protocol):
    name: str

    def rewrite(self, question: str, history: tuple[HistoryTurn, ...]) -> str | None: ...


def prepare_retrieval(
    *,
    question: str,
    history: tuple[HistoryTurn, ...],
    options: ChatOptions,
    rules: Rules,
    rewriter: FollowUpRewriter,
) -> tuple[Preparation, list[str]]:
    """The preparation and any degradations it caused (e.g. `history_rewrite_failed`)."""
    degradations: list[str] = []
    follow_up = is_follow_up(question, history, rules)
    rewritten, method = question, "none"
    if follow_up:
        rewritten, method = _rewrite(question, history, rules, rewriter, degradations)
    used = normalise(rewritten) != normalise(question)
    intent = classify_intent(question, follow_up=follow_up, rules=rules)
    plan = build_plan(rewritten, options=options, rules=rules, follow_up=follow_up, intent=intent)
    variants: tuple[str, ...] = (rewritten,)
    if follow_up and history and asks_own_question(question):
        # Asked on its own, "管理地址是什么？" would find any address: the previous question,
        # searched with it, keeps retrieval in the same document ("恢复出厂设置…" → the manual).
        previous = history[-1].retrieval_query or history[-1].question
        variants = (rewritten, f"{previous.rstrip('？?。. ')} {rewritten}")
    return (
        Preparation(
            history=history,
            follow_up=follow_up,
            rewritten_query=rewritten,
            history_rewrite_used=used,
            rewrite_method=method if used else "none",
            intent=intent,
            plan=plan,
            variants=variants,
        ),
        degradations,
    )


def is_follow_up(question: str, history: tuple[HistoryTurn, ...], rules: Rules) -> bool:
    compact = question.strip()
    if not history or not compact or len(compact) > rules.follow_up.max_chars:
        return False
    return any(pattern.search(compact) for pattern in rules.follow_up.patterns)


def classify_intent(question: str, *, follow_up: bool, rules: Rules) -> IntentResult:
    if follow_up:
        score = rules.intent.follow_up_score
        return IntentResult("FOLLOW_UP", score, score, "follow_up_rule")
    if any(p.search(question) for p in rules.intent.knowledge_patterns):
        score = rules.intent.knowledge_strong_score
        return IntentResult("KNOWLEDGE_QUERY", score, score, "strong_knowledge_rule")
    score = rules.intent.knowledge_weak_score
    return IntentResult("KNOWLEDGE_QUERY", score, score, "weak_knowledge_rule")


def build_plan(
    query: str, *, options: ChatOptions, rules: Rules, follow_up: bool, intent: IntentResult
) -> RetrievalPlan:
    defaults = rules.retrieval
    local = getattr(settings, "RAG_PROVIDER", "local") == "local"
    rerank_default = defaults.enable_rerank_local if local else defaults.enable_rerank_remote
    prefer_table = any(p.search(query) for p in rules.context.prefer_table_patterns)
    threshold = rules.faq.direct_threshold
    if follow_up:
        threshold += rules.faq.follow_up_penalty
    if intent.confidence < 0.70:
        threshold += rules.faq.low_decision_penalty
    if prefer_table:
        threshold += rules.faq.table_penalty
    top_k = options.top_k or defaults.top_k
    enable_rerank = _choose(options.enable_rerank, rerank_default)
    return RetrievalPlan(
        faq_top_k=rules.faq.top_k,
        faq_candidate_k=rules.faq.candidate_k,
        doc_top_k=top_k,
        candidate_k=max(options.candidate_k or defaults.candidate_k, top_k),
        mode=options.mode or defaults.mode,
        enable_query_rewrite=_choose(options.enable_query_rewrite, defaults.enable_query_rewrite),
        enable_rerank=enable_rerank,
        enable_parent_expansion=_choose(options.enable_parent_expansion, defaults.enable_parent_expansion),
        document_ids=options.document_ids,
        prefer_table=prefer_table,
        min_context_score=rules.context.min_context_score,
        faq_direct_threshold=round(min(threshold, 1.0), 4),
        filters=options.filters,
        # The local provider's extractive model cannot write a hypothetical answer: never by
        # default there (asked for anyway, retrieval notes it as unavailable).
        enable_hyde=_choose(options.enable_hyde, False if local else defaults.enable_hyde_remote),
        dynamic_top_k=enable_rerank and defaults.dynamic_top_k_after_rerank,
    )


def _choose(value: bool | None, default: bool) -> bool:
    return default if value is None else value


def _rewrite(question, history, rules, rewriter, degradations) -> tuple[str, str]:
    rule = RuleFollowUpRewriter(rules)
    if not isinstance(rewriter, RuleFollowUpRewriter):
        try:
            rewritten = rewriter.rewrite(question, history)
        except ProviderError as exc:
            logger.warning("follow-up rewrite failed (%s), using the rule", exc.code)
            degradations.append("history_rewrite_failed")
            rewritten = None
        if rewritten:
            return rewritten, "model"
        return rule.rewrite(question, history) or question, "rule_after_model_failure"
    return rule.rewrite(question, history) or question, "rule"


# --- rewriters ----------------------------------------------------------------------------------

_LEADING_FILLER = re.compile(r"^(那么|那如果|如果是|那要是|要是|那再|再问一下|然后|还有|另外|那)[\s，,]*")
_TRAILING_FILLER = re.compile(r"(的呢|呢|吗|啊|呀)?[\s?？。.!！~～]*$")


# A follow-up that asks its own question (it names what and asks how much / what / where) …
_OWN_QUESTION = re.compile(r"是什么|什么|多少|几[个位天次年月号点]?|哪[里儿个些]?|怎么|如何|多久|多长|多大|是否|有没有")
# … unless a pronoun points back at the previous question's subject ("它的保修期是多久？").
_POINTS_BACK = re.compile(r"它|这个|那个|这款|那款|该|此|其|上述|前者|后者")


def asks_own_question(question: str) -> bool:
    """A follow-up that names what it asks and asks it ("那管理地址是什么？"), pointing back at
    nothing with a pronoun."""
    core = _TRAILING_FILLER.sub("", _LEADING_FILLER.sub("", unicodedata.normalize("NFKC", question).strip()))
    return bool(
        _OWN_QUESTION.search(core) and not _POINTS_BACK.search(question)
        and content_terms(_OWN_QUESTION.sub(" ", core))
    )


class RuleFollowUpRewriter:
    """Deterministic rewrite of elliptical follow-ups (no model)."""

    name = "rule"

    def __init__(self, rules: Rules) -> None:
        self.boundaries = rules.follow_up.subject_boundaries

    def rewrite(self, question: str, history: tuple[HistoryTurn, ...]) -> str | None:
        if not history:
            return None
        previous = history[-1].retrieval_query or history[-1].question
        previous = unicodedata.normalize("NFKC", previous).strip()
        core = _TRAILING_FILLER.sub("", _LEADING_FILLER.sub("", unicodedata.normalize("NFKC", question).strip()))
        core = core.strip(" ，,")
        if not core:
            return previous
        if model_code_spans(core) == [core]:
            # "那 X5 呢？" after a question about the X3 Pro: the same question about another model.
            codes = model_code_spans(previous)
            if codes:
                return previous.replace(codes[0], core, 1)
        sibling = self.sibling(previous, core)
        if sibling:
            # "…几天带薪年假？" + "那婚假呢？": same question about a term of the same kind.
            return previous.replace(sibling, core, 1)
        if asks_own_question(question):
            # "那管理地址是什么？" after a RESET question asks a question of its own about the same
            # product, not about RESET: its own words are the whole subject.
            return f"{core}？"
        subject = self.subject(previous)
        if not subject or normalise(subject) in normalise(core):
            return f"{core}？"
        joiner = "" if core.startswith("的") else "的"
        return f"{subject}{joiner}{core}？"

    @staticmethod
    def sibling(previous: str, core: str) -> str:
        """A word of the previous question of the same kind as the follow-up: Chinese compounds
        of one kind share their head, the last character (年假 / 婚假, 报销单 / 申请单). Found by
        text, not by segmentation, which splits such compounds unpredictably."""
        if len(core) < 2 or not re.fullmatch(r"[\u4e00-\u9fff]+", core):
            return ""
        for index in range(len(previous) - 1, 0, -1):
            candidate = previous[index - 1:index + 1]
            if (
                previous[index] == core[-1]
                and candidate != core
                and re.fullmatch(r"[\u4e00-\u9fff]{2}", candidate)
                and candidate[0] not in "的了是有在和与及或"
            ):
                return candidate
        return ""

    def subject(self, previous: str) -> str:
        """The leading topic of the previous question, up to its first function word."""
        text = previous.rstrip("？?。.!！ ")
        cut = len(text)
        for word in self.boundaries:
            index = text.find(word, 1)
            if 0 < index < cut:
                cut = index
        subject = text[:cut].strip(" ，,")
        if not subject or len(subject) > 16:
            terms = content_terms(previous)
            subject = "".join(terms[:1])
        return subject


REWRITE_SYSTEM_PROMPT = (
    "你是检索查询改写器。根据对话历史，把用户最后的追问改写成一个独立、完整、可以直接用于检索的中文问题。"
    "必须保留型号、数字和专有名词；不要回答问题，不要解释；只输出改写后的问题本身。"
)


class ModelFollowUpRewriter:
    """Rewrite with the chat model of a generative provider; one short completion."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.name = f"model:{model.name}"

    def rewrite(self, question: str, history: tuple[HistoryTurn, ...]) -> str | None:
        lines = []
        for turn in history:
            lines.append(f"用户：{turn.question}")
            lines.append(f"助手：{_clip(turn.answer, 200)}")
        prompt = "对话历史：\n" + "\n".join(lines) + f"\n\n追问：{question}\n\n改写后的问题："
        text = self.model.complete(
            [ChatMessage("system", REWRITE_SYSTEM_PROMPT), ChatMessage("user", prompt)],
            max_tokens=120, temperature=0.0,
        )
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        first = first.strip("\"'“”「」 ").removeprefix("改写后的问题：").strip()
        if not first or len(first) > 300:
            return None
        return first


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
