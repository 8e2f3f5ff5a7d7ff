"""Reads of evaluation facts: finding a set by name, comparing two runs question by question."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Q

from .models import EvalCaseResult, EvalRun, EvalSet


def eval_set_named(*, name: str, kb_slug: str) -> EvalSet | None:
    """The set called `name` of the knowledge base `kb_slug` (names are per knowledge base),
    else the one of that name that belongs to no knowledge base."""
    return (
        EvalSet.objects.filter(Q(knowledge_base__slug=kb_slug) | Q(knowledge_base__isnull=True), name=name)
        .order_by(F("knowledge_base").asc(nulls_last=True), "pk")
        .first()
    )


def eval_set_exists(*, knowledge_base, name: str) -> bool:
    """Whether `knowledge_base` (None: no knowledge base) has a set called `name`."""
    return EvalSet.objects.filter(knowledge_base=knowledge_base, name=name.strip()[:120]).exists()


def has_default_eval_set(*, knowledge_base) -> bool:
    return knowledge_base is not None and EvalSet.objects.filter(knowledge_base=knowledge_base, is_default=True).exists()


@dataclass(frozen=True)
class MetricRow:
    name: str
    a: float | None
    b: float | None

    @property
    def delta_points(self) -> float | None:
        return None if self.a is None or self.b is None else round((self.b - self.a) * 100, 2)


@dataclass(frozen=True)
class CaseRow:
    key: str
    question: str
    rank_a: int | None
    rank_b: int | None
    change: str  # "lost", "gained", "better", "worse", "same", "only_a", "only_b"


@dataclass(frozen=True)
class RunComparison:
    a: EvalRun
    b: EvalRun
    metrics: tuple[MetricRow, ...]
    cases: tuple[CaseRow, ...]

    def count(self, change: str) -> int:
        return sum(1 for case in self.cases if case.change == change)


def numeric_metrics(run: EvalRun) -> dict[str, float]:
    return {name: value for name, value in (run.metrics or {}).items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)}


def compare_runs(a: EvalRun, b: EvalRun) -> RunComparison:
    """Metrics side by side (delta in points, b − a) and every question's gold rank in both;
    a question is lost when a found it within k and b does not (k of b's configuration)."""
    k = int(b.config.get("k") or a.config.get("k") or 5)
    metrics_a, metrics_b = numeric_metrics(a), numeric_metrics(b)
    metrics = tuple(MetricRow(name, metrics_a.get(name), metrics_b.get(name))
                    for name in sorted(set(metrics_a) | set(metrics_b)))
    rows_a = {key: (question, rank) for key, question, rank in
              EvalCaseResult.objects.filter(run=a).values_list("case_key", "question", "gold_rank")}
    rows_b = {key: (question, rank) for key, question, rank in
              EvalCaseResult.objects.filter(run=b).values_list("case_key", "question", "gold_rank")}
    cases = []
    for key in sorted(set(rows_a) | set(rows_b)):
        question = (rows_b.get(key) or rows_a.get(key))[0]
        rank_a = rows_a[key][1] if key in rows_a else None
        rank_b = rows_b[key][1] if key in rows_b else None
        cases.append(CaseRow(key, question, rank_a, rank_b, _change(key in rows_a, key in rows_b, rank_a, rank_b, k)))
    return RunComparison(a=a, b=b, metrics=metrics, cases=tuple(cases))


def _change(in_a: bool, in_b: bool, rank_a: int | None, rank_b: int | None, k: int) -> str:
    if not in_b:
        return "only_a"
    if not in_a:
        return "only_b"
    found_a, found_b = rank_a is not None and rank_a <= k, rank_b is not None and rank_b <= k
    if found_a and not found_b:
        return "lost"
    if found_b and not found_a:
        return "gained"
    if rank_a == rank_b:
        return "same"
    if rank_b is None or (rank_a is not None and rank_b > rank_a):
        return "worse"
    return "better"
