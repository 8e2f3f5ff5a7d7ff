"""Answer evaluation: each case through the full RAGService, the code behind POST /api/chat.

Per answerable case (citation markers stripped, whitespace ignored):
  containment        the answer contains any reference answer
  first line         its first line does (the sentence a reader reads first)
  citation validity  a cited source's text contains a reference answer (the citation supports it)
  declined           the turn said the documents do not answer (insufficient context, out of scope)
Per unanswerable case: declined is the right outcome (insufficient-context rate).
A case with `history` is asked after those questions, in one conversation (follow-ups). Results
are also given per `category` (paraphrase, traditional, english, follow_up…).
Calibration: for each `answer_confidence` level, how often the answers at that level were right
(containment), with declines in a row of their own (right when the case is unanswerable) — a
reliability table staff can read as "high means right".
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable, Sequence

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from chat.contracts import ChatOptions, ChatQuery, HitType, Requester, TurnResult
from chat.pipeline.rag import RAGService
from knowledge.models import KnowledgeBase
from retrieval.contracts import MetadataFilter

from . import services
from .metrics import percentile
from .models import EvalCase, EvalSet, RunKind

INSUFFICIENT = "根据当前知识库无法确定"
LEVELS = ("high", "medium", "low")
_MARKER = re.compile(r"\[来源 \d+\]\(citation://\d+\)|\[来源 \d+\]")
EVAL_USER = "evaluation"


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text or "")


def contains_any(text: str, answers: Sequence[str]) -> bool:
    haystack = squash(_MARKER.sub("", text))
    return any(squash(answer) and squash(answer) in haystack for answer in answers)


def declined(result: TurnResult) -> bool:
    return (
        result.hit_type == HitType.INSUFFICIENT_CONTEXT
        or result.intent.intent == "OUT_OF_SCOPE"
        or INSUFFICIENT in result.answer
    )


def first_line(answer: str) -> str:
    for line in (answer or "").splitlines():
        if _MARKER.sub("", line).strip():
            return line
    return ""


def clarified(result: TurnResult) -> bool:
    return result.hit_type == HitType.CLARIFY


def judge(case: EvalCase, result: TurnResult) -> dict:
    """One case's answer metrics (1.0 / 0.0, so that averages are rates). A clarifying question
    is neither an answer nor a decline: it counts only as `clarified`, in no other rate."""
    if clarified(result):
        return {"clarified": 1.0, "correct": 0.0}
    refused = declined(result)
    if not case.answerable:
        return {"declined": float(refused), "correct": float(refused)}
    # Only what the answer cites counts: a source it was given but did not cite supports nothing.
    cited = [c for c in result.citations if c.cited]
    contained = contains_any(result.answer, case.answers) if case.answers else False
    supported = any(contains_any(c.text, case.answers) for c in cited) if case.answers else False
    first = contains_any(first_line(result.answer), case.answers) if case.answers else False
    return {"containment": float(contained), "first_line": float(first), "citation_valid": float(supported),
            "declined": float(refused), "correct": float(contained and not refused),
            "chars": float(len(squash(_MARKER.sub("", result.answer))))}


def evaluate_answers(
    *, kb: KnowledgeBase, eval_set: EvalSet, limit: int | None = None, actor=None,
    progress: Callable[[int, int], None] | None = None, filters: Sequence[MetadataFilter] = (),
) -> dict:
    """Every case of the set through RAGService, stored as an answers run with a row per case;
    `filters`: metadata filters every question (and its history) is asked with."""
    options = ChatOptions(filters=tuple(filters))
    cases = list(eval_set.cases.order_by("ordinal", "id"))
    if limit is not None:
        cases = cases[:limit]
    # A superuser (the only account that reads every knowledge base whatever its groups), so that
    # restricted knowledge bases answer too; no usable password, so nobody signs in as it.
    user, _created = get_user_model().objects.update_or_create(
        username=EVAL_USER,
        defaults={"is_staff": True, "is_superuser": True},
        create_defaults={"is_staff": True, "is_superuser": True, "password": make_password(None)},
    )
    service = RAGService()
    run = services.start_run(eval_set=eval_set, kind=RunKind.ANSWERS, label="rag", knowledge_base=kb,
                             version=kb.active_version, actor=actor,
                             config={"limit": limit, **({"filters": [f.as_dict() for f in filters]} if filters else {})})
    try:
        outcomes, latencies = [], []
        routes, hit_types = Counter(), Counter()
        for number, case in enumerate(cases, 1):
            conversation = None
            for earlier in case.history or ():
                conversation = service.answer(
                    query=ChatQuery(knowledge_base_id=kb.slug, question=earlier, conversation_id=conversation,
                                    options=options),
                    requester=Requester(user),
                ).conversation_id
            started = time.perf_counter()
            result = service.answer(query=ChatQuery(knowledge_base_id=kb.slug, question=case.question,
                                                    conversation_id=conversation, options=options),
                                    requester=Requester(user))
            elapsed = (time.perf_counter() - started) * 1000
            latencies.append(elapsed)
            routes[str(result.route)] += 1
            hit_types[str(result.hit_type)] += 1
            confidence = result.answer_confidence
            outcomes.append(services.CaseOutcome(
                case=case, gold=list(case.answers), retrieved=[], gold_rank=None, metrics=judge(case, result),
                latency_ms=elapsed, answer=result.answer,
                citations=[{"number": c.number, "title": c.title, "chunk_id": c.chunk_id, "faq_id": c.faq_id,
                            "cited": c.cited, "text": c.text[:500]} for c in result.citations],
                details={"route": str(result.route), "hit_type": str(result.hit_type),
                         "intent": result.intent.intent, "confidence": str(confidence.level), "trace_id": str(result.trace_id), "answerable": case.answerable,
                         "category": case.category, "declined": declined(result),
                         "score": confidence.score,
                         "features": confidence.features.as_dict() if confidence.features else None},
            ))
            if progress is not None:
                progress(number, len(cases))
        metrics = {**summarize_answers(outcomes), "routes": dict(routes), "hit_types": dict(hit_types),
                   "calibration": calibration(outcomes), "categories": by_category(outcomes)}
        latency = {"p50": round(percentile(latencies, 50), 2), "p95": round(percentile(latencies, 95), 2)}
        services.finish_run(run=run, outcomes=outcomes, metrics=metrics, latency_ms=latency)
    except BaseException as exc:
        services.fail_run(run=run, error=f"{type(exc).__name__}: {exc}")
        raise
    cases = [
        {"key": o.case.key, "category": o.case.category, "answerable": o.case.answerable,
         "hit_type": o.details["hit_type"], "declined": o.details["declined"], "right": o.metrics["correct"],
         "level": o.details["confidence"], "score": o.details["score"], "features": o.details["features"]}
        for o in outcomes
    ]
    return {"run_id": run.pk, "metrics": metrics, "latency_ms": latency, "cases": cases}


def summarize_answers(outcomes: Sequence[services.CaseOutcome]) -> dict:
    asked_back = [o for o in outcomes if o.metrics.get("clarified")]
    outcomes = [o for o in outcomes if not o.metrics.get("clarified")]
    answerable = [o for o in outcomes if o.case.answerable]
    unanswerable = [o for o in outcomes if not o.case.answerable]

    def rate(items, key: str) -> float | None:
        return round(sum(o.metrics[key] for o in items) / len(items), 4) if items else None

    answered = [o for o in answerable if not o.metrics["declined"]]
    lengths = sorted(o.metrics.get("chars", 0.0) for o in answered)
    metrics = {
        "answerable": len(answerable), "unanswerable": len(unanswerable),
        "containment": rate(answerable, "containment"),
        "first_line": rate([o for o in answerable if "first_line" in o.metrics], "first_line"),
        "median_chars": percentile(lengths, 50) if lengths else None,
        "citation_validity": rate(answerable, "citation_valid"),
        "answerable_declined": rate(answerable, "declined"),
        "insufficient_context_rate": rate(unanswerable, "declined"),
        "clarified": len(asked_back),
    }
    return {name: value for name, value in metrics.items() if value is not None}


def calibration(outcomes: Sequence[services.CaseOutcome]) -> list[dict]:
    """Share right per confidence level of the answers given, then the declines apart.

    A decline is neither right nor wrong at a level: it says nothing, so mixing declines into the
    levels would let "低" look wrong because it declines well. Answers are right when they contain
    a reference answer (an answer to an unanswerable case is wrong); declines are right when the
    case is unanswerable."""
    table = []
    outcomes = [o for o in outcomes if not o.metrics.get("clarified")]
    answers = [o for o in outcomes if not (o.details or {}).get("declined", o.metrics.get("declined"))]
    for level in (*LEVELS, ""):
        items = [o for o in answers if (o.details or {}).get("confidence", "") == level]
        if not items:
            continue
        right = sum(o.metrics["correct"] for o in items)
        table.append({"level": level or "none", "count": len(items), "accuracy": round(right / len(items), 4),
                      "answerable": sum(1 for o in items if o.case.answerable)})
    given = {id(o) for o in answers}
    refused = [o for o in outcomes if id(o) not in given]
    if refused:
        right = sum(1 for o in refused if not o.case.answerable)
        table.append({"level": "declined", "count": len(refused), "accuracy": round(right / len(refused), 4),
                      "answerable": sum(1 for o in refused if o.case.answerable)})
    return table


def by_category(outcomes: Sequence[services.CaseOutcome]) -> dict[str, dict]:
    """Right / asked per case category (answerable: containment; unanswerable: declined)."""
    groups: dict[str, list] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.case.category or "uncategorised", []).append(outcome)
    return {
        name: {"count": len(items), "right": int(sum(o.metrics["correct"] for o in items)),
               "first_line": int(sum(o.metrics.get("first_line", 0.0) for o in items)),
               "clarified": int(sum(o.metrics.get("clarified", 0.0) for o in items))}
        for name, items in sorted(groups.items())
    }
