"""The port through which publishing asks "did this draft get worse?" (the release check).

Knowledge does not evaluate anything itself: the check lives above it (`evaluation.release`)
and is chosen in settings (`RAG_RELEASE_GATE`, a dotted path; empty: no check). Activation asks
the gate for the draft's report and, when the knowledge base blocks regressions
(`release_max_regression_points`), refuses a draft that regressed or whose check has not
finished — unless staff override it with a reason, which the activation log keeps.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Literal, Protocol

from django.conf import settings
from django.utils.module_loading import import_string
from django.utils.translation import gettext as _

from knowledge.models import KnowledgeBaseVersion


@dataclass(frozen=True)
class MetricDelta:
    name: str
    active: float | None
    draft: float | None
    # The metric in words, as the gate that measured it names it ("召回率@5"); "" shows the name.
    label: str = ""

    @property
    def delta_points(self) -> float | None:
        if self.active is None or self.draft is None:
            return None
        return round((self.draft - self.active) * 100, 2)


@dataclass(frozen=True)
class ReleaseReport:
    status: Literal["pending", "running", "done", "failed"]
    eval_set: str
    metrics: tuple[MetricDelta, ...] = ()
    lost: tuple[str, ...] = ()  # questions found by the active version and not by the draft
    gained: tuple[str, ...] = ()
    draft_run_id: int | None = None
    active_run_id: int | None = None
    error: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def worst_drop_points(self) -> float:
        drops = [-(m.delta_points or 0.0) for m in self.metrics if m.delta_points is not None]
        return max([0.0, *drops])

    def as_dict(self) -> dict:
        data = asdict(self)
        data.update(lost=list(self.lost), gained=list(self.gained), notes=list(self.notes))
        data["metrics"] = [{**asdict(m), "delta_points": m.delta_points} for m in self.metrics]
        data["worst_drop_points"] = self.worst_drop_points
        return data


class ReleaseGate(Protocol):
    def report(self, *, version: KnowledgeBaseVersion) -> ReleaseReport | None:
        """The draft's check against the active version; None when the KB has no check."""


@lru_cache(maxsize=4)
def _load(path: str) -> ReleaseGate:
    return import_string(path)()


def release_gate() -> ReleaseGate | None:
    return _load(settings.RAG_RELEASE_GATE) if settings.RAG_RELEASE_GATE else None


def blocking_reason(*, version: KnowledgeBaseVersion, report: ReleaseReport | None) -> str:
    """Why publishing this version is refused under its KB's limit ("" when it is not)."""
    limit = version.knowledge_base.release_max_regression_points
    if limit is None or report is None:
        return ""
    if report.status in ("pending", "running"):
        return _("上线检查尚未完成（评测集「%(set)s」），请稍后再发布。") % {"set": report.eval_set}
    if report.status == "failed":
        return _("上线检查失败：%(error)s") % {"error": report.error or "—"}
    if report.worst_drop_points > limit:
        return _("上线检查发现退步 %(drop).1f 个百分点（允许 %(limit).1f）：%(lost)d 个问题在草稿中找不到了。") % {
            "drop": report.worst_drop_points, "limit": limit, "lost": len(report.lost)}
    return ""
