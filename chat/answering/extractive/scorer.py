"""The learned scorer: a logistic model over `features.FEATURES`, trained by
`manage.py train_answerer` on public Chinese reading-comprehension data and kept as versioned
weights (`weights.json` beside this module). Its probability is the chance that a unit holds the
answer; the best unit's probability decides whether the evidence answers at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .features import FEATURES

WEIGHTS_PATH = Path(__file__).with_name("weights.json")


class WeightsMismatch(ValueError):
    """The weights were trained on other features than this code computes."""


@dataclass(frozen=True)
class LearnedScorer:
    version: str
    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    threshold: float  # the best unit's probability below which the answer is the decline
    metadata: dict

    @classmethod
    def load(cls, path: Path = WEIGHTS_PATH) -> LearnedScorer:
        data = json.loads(path.read_text(encoding="utf-8"))
        scorer = cls(
            version=data["version"], features=tuple(data["features"]), mean=np.asarray(data["mean"], dtype=np.float64),
            scale=np.asarray(data["scale"], dtype=np.float64), coef=np.asarray(data["coef"], dtype=np.float64),
            intercept=float(data["intercept"]), threshold=float(data["threshold"]), metadata=data.get("metadata", {}),
        )
        if scorer.features != FEATURES:
            raise WeightsMismatch(f"{path} was trained on {scorer.features}, the code computes {FEATURES}")
        return scorer

    def probabilities(self, rows: np.ndarray) -> np.ndarray:
        if not len(rows):
            return np.zeros(0)
        logits = ((rows - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-np.clip(logits, -30, 30)))

    def as_dict(self) -> dict:
        return {
            "version": self.version, "features": list(self.features), "mean": self.mean.tolist(),
            "scale": self.scale.tolist(), "coef": self.coef.tolist(), "intercept": self.intercept,
            "threshold": self.threshold, "metadata": self.metadata,
        }
