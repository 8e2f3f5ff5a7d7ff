"""Writes of evaluation facts: importing sets, recording runs and their per-case results."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from knowledge.models import KnowledgeBase, KnowledgeBaseVersion
from ragsite.errors import ValidationFailed

from .importers import CaseDraft
from .models import EvalCase, EvalCaseResult, EvalRun, EvalSet, RunKind, RunStatus


CASE_FIELDS = [
    "ordinal", "question", "expected_documents", "expected_chunks", "answers", "answerable", "category", "history",
]


@dataclass(frozen=True)
class ImportOutcome:
    eval_set: EvalSet
    created: int
    updated: int
    removed: int
    unchanged: int


@transaction.atomic
def import_eval_set(
    *,
    name: str,
    cases: Sequence[CaseDraft],
    source: str = "",
    knowledge_base: KnowledgeBase | None = None,
    default: bool = False,
    description: str = "",
    actor=None,
) -> ImportOutcome:
    """Create or replace the cases of `knowledge_base`'s set named `name` (names are per
    knowledge base; None: the sets of no knowledge base) from `cases`, matched by key:
    importing the same file twice changes nothing; a case that left the file is removed (its
    past results keep their copy of the question)."""
    name = name.strip()
    if not name:
        raise ValidationFailed(_("请填写评测集名称。"), code="eval_set_name_required")
    if default and knowledge_base is None:
        raise ValidationFailed(_("默认评测集必须属于一个知识库。"), code="default_needs_kb")
    sets = EvalSet.objects.select_for_update()
    try:
        eval_set, _created = sets.get_or_create(
            knowledge_base=knowledge_base, name=name[:120], defaults={"created_by": _user_or_none(actor)}
        )
    except EvalSet.MultipleObjectsReturned:
        # Only sets of no knowledge base can share a name: those left by deleted knowledge bases.
        eval_set = sets.filter(knowledge_base=None, name=name[:120]).order_by("pk").first()
    if default:
        # One default per knowledge base: the previous one steps down in the same transaction.
        EvalSet.objects.filter(knowledge_base=knowledge_base, is_default=True).exclude(pk=eval_set.pk).update(is_default=False)
        eval_set.is_default = True
    if description:
        eval_set.description = description
    eval_set.source = source[:300]

    existing = {case.key: case for case in EvalCase.objects.filter(eval_set=eval_set)}
    created = updated = unchanged = 0
    to_create, to_update = [], []
    for ordinal, draft in enumerate(cases):
        values = dict(zip(CASE_FIELDS, (
            ordinal, draft.question, list(draft.expected_documents), list(draft.expected_chunks), list(draft.answers),
            draft.answerable, draft.category, list(draft.history),
        ), strict=True))
        case = existing.pop(draft.key, None)
        if case is None:
            to_create.append(EvalCase(eval_set=eval_set, key=draft.key, **values))
            created += 1
        elif any(getattr(case, field) != value for field, value in values.items()):
            for field, value in values.items():
                setattr(case, field, value)
            to_update.append(case)
            updated += 1
        else:
            unchanged += 1
    EvalCase.objects.bulk_create(to_create, batch_size=500)
    EvalCase.objects.bulk_update(to_update, CASE_FIELDS, batch_size=500)
    removed = EvalCase.objects.filter(pk__in=[case.pk for case in existing.values()]).delete()[0]
    if created or updated or removed:
        eval_set.cases_changed_at = timezone.now()
    eval_set.save()
    return ImportOutcome(eval_set=eval_set, created=created, updated=updated, removed=removed, unchanged=unchanged)


@dataclass(frozen=True)
class CaseOutcome:
    """What one case produced in a run (the runner computes it, this module stores it)."""

    case: EvalCase
    gold: list[str]
    retrieved: list[dict]
    gold_rank: int | None
    metrics: dict[str, float]
    latency_ms: float
    answer: str = ""
    citations: list[dict] | None = None
    details: dict | None = None


@transaction.atomic
def start_run(
    *,
    eval_set: EvalSet,
    kind: str = RunKind.RETRIEVAL,
    label: str,
    knowledge_base: KnowledgeBase,
    version: KnowledgeBaseVersion | None,
    config: dict,
    embedding_model: str = "",
    actor=None,
) -> EvalRun:
    return EvalRun.objects.create(
        eval_set=eval_set, kind=kind, label=label[:120], knowledge_base=knowledge_base, version=version,
        version_number=version.number if version else None, config=config, provider=settings.RAG_PROVIDER,
        embedding_model=embedding_model or knowledge_base.embedding_model, git_revision=git_revision(),
        created_by=_user_or_none(actor),
    )


@transaction.atomic
def finish_run(
    *, run: EvalRun, outcomes: Sequence[CaseOutcome], metrics: dict, latency_ms: dict, usage: dict | None = None,
) -> EvalRun:
    EvalCaseResult.objects.bulk_create(
        [
            EvalCaseResult(
                run=run, case=o.case, case_key=o.case.key, question=o.case.question, gold=o.gold,
                retrieved=o.retrieved, gold_rank=o.gold_rank, metrics=o.metrics, latency_ms=round(o.latency_ms, 2),
                answer=o.answer, citations=o.citations or [], details=o.details or {},
            )
            for o in outcomes
        ],
        batch_size=500,
    )
    run.metrics = metrics
    run.latency_ms = latency_ms
    run.usage = usage or {}
    run.case_count = len(outcomes)
    run.status = RunStatus.SUCCEEDED
    run.finished_at = timezone.now()
    run.save(update_fields=["metrics", "latency_ms", "usage", "case_count", "status", "finished_at"])
    return run


def fail_run(*, run: EvalRun, error: str) -> EvalRun:
    EvalRun.objects.filter(pk=run.pk).update(status=RunStatus.FAILED, error=error[:2000], finished_at=timezone.now())
    run.refresh_from_db()
    return run


@lru_cache(maxsize=1)
def git_revision() -> str:
    """The checkout's commit, for telling runs of different code apart ("" outside git)."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=Path(settings.BASE_DIR),
            capture_output=True, text=True, timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def _user_or_none(actor):
    return actor if actor is not None and actor.is_authenticated else None
