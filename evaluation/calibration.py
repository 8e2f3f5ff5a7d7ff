"""Fitting the confidence of document answers on measured runs (`manage.py calibrate_confidence`).

Each answer that `evaluate_answers` recorded carries the features of `AnswerFeatures` and whether
it was right. A logistic regression (L2-regularised, Newton steps) maps features to a probability
of being right; its quality is judged on held-out folds, never on the answers it was fitted on,
and the high cut-off is the lowest probability at which the held-out answers above it were right
at least `target` of the time on every set separately (one set's easy questions must not carry
another's hard ones).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chat.pipeline.confidence import AnswerFeatures


@dataclass(frozen=True)
class Sample:
    source: str  # the set (report) it came from
    features: tuple[float, ...]
    right: bool


@dataclass(frozen=True)
class Fit:
    bias: float
    weights: tuple[float, ...]

    def probabilities(self, matrix: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(self.bias + matrix @ np.asarray(self.weights))))


def samples_from_cases(cases: Sequence[dict], *, source: str) -> list[Sample]:
    """The document answers of a report's cases (declines and FAQ or direct answers have no
    features: their confidence is not this model's)."""
    found = []
    for case in cases:
        features = case.get("features")
        if case.get("declined") or case.get("hit_type") != "rag" or not features:
            continue
        found.append(Sample(source, tuple(float(features[name]) for name in AnswerFeatures.NAMES),
                            bool(case.get("right"))))
    return found


def fit(samples: Sequence[Sample], *, l2: float = 1.0, steps: int = 50) -> Fit:
    matrix = np.asarray([s.features for s in samples], dtype=np.float64)
    labels = np.asarray([1.0 if s.right else 0.0 for s in samples])
    design = np.hstack([np.ones((len(samples), 1)), matrix])
    theta = np.zeros(design.shape[1])
    penalty = np.eye(design.shape[1]) * l2
    penalty[0, 0] = 0.0  # the bias is not shrunk
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(design @ theta)))
        gradient = design.T @ (p - labels) + penalty @ theta
        hessian = (design * (p * (1 - p))[:, None]).T @ design + penalty
        step = np.linalg.solve(hessian + np.eye(len(theta)) * 1e-9, gradient)
        theta -= step
        if float(np.max(np.abs(step))) < 1e-8:
            break
    return Fit(bias=float(theta[0]), weights=tuple(float(w) for w in theta[1:]))


def cross_validated(samples: Sequence[Sample], *, folds: int = 5, l2: float = 1.0) -> np.ndarray:
    """Each sample's probability from a model fitted without its fold (folds interleaved, so
    every set is spread over all of them)."""
    out = np.zeros(len(samples))
    indices = np.arange(len(samples))
    for fold in range(folds):
        held = indices % folds == fold
        model = fit([s for s, h in zip(samples, held, strict=True) if not h], l2=l2)
        matrix = np.asarray([s.features for s, h in zip(samples, held, strict=True) if h], dtype=np.float64)
        if len(matrix):
            out[held] = model.probabilities(matrix)
    return out


def auc(probabilities: Sequence[float], labels: Sequence[bool]) -> float:
    """The chance that a right answer scores above a wrong one (ties count half)."""
    positives = [p for p, y in zip(probabilities, labels, strict=True) if y]
    negatives = [p for p, y in zip(probabilities, labels, strict=True) if not y]
    if not positives or not negatives:
        return math.nan
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def reliability(probabilities: Sequence[float], samples: Sequence[Sample], threshold: float) -> dict[str, tuple[int, float]]:
    """Per set: answers at or above `threshold`, and the share of them that were right."""
    table: dict[str, tuple[int, float]] = {}
    for source in sorted({s.source for s in samples}):
        chosen = [s.right for p, s in zip(probabilities, samples, strict=True) if s.source == source and p >= threshold]
        table[source] = (len(chosen), (sum(chosen) / len(chosen)) if chosen else math.nan)
    return table


def lowest_reliable_threshold(probabilities: Sequence[float], samples: Sequence[Sample], *, target: float,
                              grid: Sequence[float] = tuple(x / 100 for x in range(50, 100))) -> float | None:
    """The lowest cut-off at which every set's answers above it were right at least `target`
    of the time (and at least one answer is above it)."""
    for threshold in grid:
        table = reliability(probabilities, samples, threshold)
        counts = [count for count, _share in table.values()]
        if sum(counts) and all(count == 0 or share >= target for count, share in table.values()):
            return threshold
    return None
