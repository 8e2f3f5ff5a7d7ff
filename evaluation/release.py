"""The release check: a READY draft answers the knowledge base's default evaluation set before it
is published, next to the active version's run on the same set.

    draft READY → (after commit) version_ready → release_check_task(version) in the background:
        run the default set on the draft's documents (RetrievalRequest.version_id), and on the
        active version's too when its last check is older than the set
    publish page / activation → ReleaseCheck.report(version): metric deltas in points, the
        questions found before and lost now, and the reverse (knowledge.release_gate)
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django_tasks import task

from knowledge.models import KnowledgeBase, KnowledgeBaseVersion, VersionStatus
from knowledge.release_gate import MetricDelta, ReleaseReport

from .models import EvalRun, EvalSet, RunKind, RunStatus
from .runner import evaluate_mode
from .selectors import found_within_k

logger = logging.getLogger(__name__)

PURPOSE = "release_check"


def default_eval_set(kb: KnowledgeBase) -> EvalSet | None:
    return EvalSet.objects.filter(knowledge_base=kb, is_default=True).first()


def schedule_release_check(*, version_id: int, **kwargs) -> None:
    """Receiver of knowledge.signals.version_ready: queue the check when the KB has a default set."""
    version = KnowledgeBaseVersion.objects.select_related("knowledge_base").filter(pk=version_id).first()
    if version is None or default_eval_set(version.knowledge_base) is None:
        return
    transaction.on_commit(lambda: release_check_task.enqueue(version_id=version_id))


def run_release_check(*, version: KnowledgeBaseVersion) -> list[EvalRun]:
    """The draft's run, and the active version's when it has none for the set as it is now."""
    kb = version.knowledge_base
    eval_set = default_eval_set(kb)
    if eval_set is None:
        return []
    runs = []
    targets = [version]
    active = kb.active_version
    if active is not None and active.pk != version.pk and _latest(eval_set, active) is None:
        targets.insert(0, active)
    for target in targets:
        report = evaluate_mode(
            kb=kb, eval_set=eval_set, mode=settings.RAG_RELEASE_CHECK_MODE, k=settings.RAG_RELEASE_CHECK_K,
            version=target, purpose=PURPOSE,
        )
        runs.append(EvalRun.objects.get(pk=report["run_id"]))
    return runs


@task(queue_name="default")
def release_check_task(*, version_id: int) -> dict:
    version = KnowledgeBaseVersion.objects.select_related("knowledge_base").filter(pk=version_id).first()
    if version is None or version.status not in (VersionStatus.READY, VersionStatus.ACTIVE):
        return {"version_id": version_id, "skipped": True}
    runs = run_release_check(version=version)
    return {"version_id": version_id, "runs": [run.pk for run in runs]}


class ReleaseCheck:
    """`knowledge.release_gate.ReleaseGate` over the stored release-check runs."""

    def report(self, *, version: KnowledgeBaseVersion) -> ReleaseReport | None:
        kb = version.knowledge_base
        eval_set = default_eval_set(kb)
        if eval_set is None:
            return None
        draft_run = _latest(eval_set, version, finished=False)
        if draft_run is None:
            return ReleaseReport(status="pending", eval_set=eval_set.name)
        if draft_run.status == RunStatus.RUNNING:
            return ReleaseReport(status="running", eval_set=eval_set.name, draft_run_id=draft_run.pk)
        if draft_run.status == RunStatus.FAILED:
            return ReleaseReport(status="failed", eval_set=eval_set.name, draft_run_id=draft_run.pk,
                                 error=draft_run.error)
        active = kb.active_version
        active_run = _latest(eval_set, active) if active is not None and active.pk != version.pk else None
        names = sorted(draft_run.metrics)
        metrics = tuple(
            MetricDelta(name=name, active=active_run.metrics.get(name) if active_run else None,
                        draft=draft_run.metrics.get(name))
            for name in names
        )
        lost, gained = _found_changes(active_run, draft_run) if active_run else ((), ())
        notes = () if active_run else ("no_active_run",)
        return ReleaseReport(status="done", eval_set=eval_set.name, metrics=metrics, lost=lost, gained=gained,
                             draft_run_id=draft_run.pk, active_run_id=active_run.pk if active_run else None,
                             notes=notes)


def _latest(eval_set: EvalSet, version: KnowledgeBaseVersion, *, finished: bool = True) -> EvalRun | None:
    """The newest release-check run of this version on the set, not older than the set's cases."""
    runs = EvalRun.objects.filter(
        eval_set=eval_set, version=version, kind=RunKind.RETRIEVAL, config__purpose=PURPOSE,
        started_at__gte=eval_set.updated_at,
    )
    if finished:
        runs = runs.filter(status=RunStatus.SUCCEEDED)
    return runs.order_by("-started_at", "-id").first()


def _found_changes(before: EvalRun, after: EvalRun) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Questions whose gold was within k before and not now (lost), and the reverse (gained)."""
    k = int(after.config.get("k") or settings.RAG_RELEASE_CHECK_K)
    then, now = found_within_k(before, k=k), found_within_k(after, k=k)
    lost = tuple(then[key] for key in sorted(set(then) - set(now)))
    gained = tuple(now[key] for key in sorted(set(now) - set(then)))
    return lost, gained
