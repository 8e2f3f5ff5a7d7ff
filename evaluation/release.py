"""The release check: a READY draft answers the knowledge base's default evaluation set before it
is published, next to the active version's run on the same set.

    draft READY → (after commit) version_ready → release_check_task(version) in the background:
        run the default set on the draft's documents (RetrievalRequest.version_id), and on the
        active version's too when its last check is older than the set
    publish page / activation → ReleaseCheck.report(version): metric deltas in points, the
        questions found before and lost now, and the reverse (knowledge.catalog.release_gate)
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django_tasks import task

from knowledge.models import KnowledgeBase, KnowledgeBaseVersion, VersionStatus
from knowledge.catalog.release_gate import MetricDelta, ReleaseReport

from .models import EvalRun, EvalSet, RunKind, RunStatus
from .runner import evaluate_mode
from .metric_names import metric_name
from .selectors import compare_runs, numeric_metrics

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
    """The draft's run, then the active version's when it has none for the set as it is now.
    A run that fails is recorded as failed (the report says so); it does not stop the other."""
    kb = version.knowledge_base
    eval_set = default_eval_set(kb)
    if eval_set is None:
        return []
    targets = [version]
    active = kb.active_version
    if active is not None and active.pk != version.pk and _latest(eval_set, active) is None:
        targets.append(active)
    runs = []
    for target in targets:
        try:
            evaluate_mode(kb=kb, eval_set=eval_set, mode=settings.RAG_RELEASE_CHECK_MODE,
                          k=settings.RAG_RELEASE_CHECK_K, version=target, purpose=PURPOSE)
        except Exception:
            logger.exception("release check of %s v%s on %s failed", kb.slug, target.number, eval_set.name)
        run = _latest(eval_set, target, finished=False)
        if run is not None:
            runs.append(run)
    return runs


@task(queue_name="default")
def release_check_task(*, version_id: int) -> dict:
    version = KnowledgeBaseVersion.objects.select_related("knowledge_base").filter(pk=version_id).first()
    if version is None or version.status not in (VersionStatus.READY, VersionStatus.ACTIVE):
        return {"version_id": version_id, "skipped": True}
    runs = run_release_check(version=version)
    return {"version_id": version_id, "runs": [run.pk for run in runs]}


class ReleaseCheck:
    """`knowledge.catalog.release_gate.ReleaseGate` over the stored release-check runs."""

    def report(self, *, version: KnowledgeBaseVersion) -> ReleaseReport | None:
        kb = version.knowledge_base
        eval_set = default_eval_set(kb)
        if eval_set is None:
            return None
        active = kb.active_version
        draft_run = _latest(eval_set, version, finished=False)
        active_run = (_latest(eval_set, active, finished=False)
                      if active is not None and active.pk != version.pk else None)
        # The draft's state decides first; a comparison needs the active version's run as well.
        for run, needed in ((draft_run, True), (active_run, active is not None and active.pk != version.pk)):
            if run is None and needed:
                return ReleaseReport(status="pending", eval_set=eval_set.name)
            if run is not None and run.status == RunStatus.RUNNING:
                return ReleaseReport(status="running", eval_set=eval_set.name, draft_run_id=draft_run.pk if draft_run else None)
            if run is not None and run.status == RunStatus.FAILED:
                return ReleaseReport(status="failed", eval_set=eval_set.name, error=run.error,
                                     draft_run_id=draft_run.pk if draft_run else None)
        if active_run is None:
            # The first version of the knowledge base: nothing to compare with.
            metrics = tuple(MetricDelta(name=name, active=None, draft=value, label=metric_name(name))
                            for name, value in sorted(numeric_metrics(draft_run).items()))
            return ReleaseReport(status="done", eval_set=eval_set.name, metrics=metrics, draft_run_id=draft_run.pk,
                                 notes=("no_active_version",))
        comparison = compare_runs(active_run, draft_run)
        return ReleaseReport(
            status="done", eval_set=eval_set.name,
            metrics=tuple(MetricDelta(name=row.name, active=row.a, draft=row.b, label=metric_name(row.name)) for row in comparison.metrics),
            lost=tuple(case.question for case in comparison.cases if case.change == "lost"),
            gained=tuple(case.question for case in comparison.cases if case.change == "gained"),
            draft_run_id=draft_run.pk, active_run_id=active_run.pk,
        )


def _latest(eval_set: EvalSet, version: KnowledgeBaseVersion, *, finished: bool = True) -> EvalRun | None:
    """The newest release-check run of this version on the set, not older than the set's cases."""
    runs = EvalRun.objects.filter(eval_set=eval_set, version=version, kind=RunKind.RETRIEVAL, config__purpose=PURPOSE)
    if eval_set.cases_changed_at is not None:
        runs = runs.filter(started_at__gte=eval_set.cases_changed_at)
    if finished:
        runs = runs.filter(status=RunStatus.SUCCEEDED)
    return runs.order_by("-started_at", "-id").first()
