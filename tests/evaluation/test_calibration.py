"""Fitting answer confidence on measured runs: the model, held-out folds, the cut-off per set."""

from __future__ import annotations

import io
import json
import random

import pytest
from django.core.management import CommandError, call_command

from evaluation.calibration import (
    Sample,
    auc,
    cross_validated,
    fit,
    lowest_reliable_threshold,
    samples_from_cases,
)


def synthetic(n=400, seed=7, source="a"):
    """Answers whose coverage predicts being right (P = coverage), other features noise."""
    rng = random.Random(seed)
    samples = []
    for _ in range(n):
        coverage = rng.random()
        samples.append(Sample(source, (coverage, rng.random(), rng.random(), 1.0, 1.0), rng.random() < coverage))
    return samples


def test_the_fit_finds_the_feature_that_predicts_being_right():
    model = fit(synthetic())
    assert model.weights[0] > 2.0
    assert all(abs(w) < model.weights[0] / 2 for w in model.weights[1:3])


def test_held_out_probabilities_rank_right_above_wrong():
    samples = synthetic()
    held_out = cross_validated(samples)
    assert auc(held_out, [s.right for s in samples]) > 0.75
    assert auc([0.5, 0.5], [True, False]) == 0.5


def test_the_cut_off_holds_on_every_set_separately():
    # given: two sets, the second one harder (right less often at the same coverage)
    easy = synthetic(source="easy")
    hard = [Sample("hard", s.features, s.right and random.Random(i).random() < 0.9) for i, s in enumerate(synthetic(seed=3))]
    samples = easy + hard
    probabilities = [s.features[0] for s in samples]
    # when
    both = lowest_reliable_threshold(probabilities, samples, target=0.9)
    alone = lowest_reliable_threshold(probabilities[:len(easy)], easy, target=0.9)
    # then: the hard set pushes the cut-off up
    assert alone is not None and both is not None and both >= alone


def test_only_document_answers_with_features_are_samples():
    cases = [
        {"hit_type": "rag", "declined": False, "right": 1.0,
         "features": {"coverage": 1, "relevance": 1, "meaning": 0, "shape": 1, "agreement": 1}},
        {"hit_type": "rag", "declined": True, "right": 0.0, "features": None},
        {"hit_type": "faq_direct", "declined": False, "right": 1.0, "features": None},
    ]
    assert samples_from_cases(cases, source="x") == [Sample("x", (1.0, 1.0, 0.0, 1.0, 1.0), True)]


def test_the_command_prints_reliability_and_the_rules_table(tmp_path):
    rng = random.Random(1)
    cases = []
    for _ in range(300):
        coverage = rng.random()
        cases.append({"hit_type": "rag", "declined": False, "right": float(rng.random() < coverage ** 0.3),
                      "features": {"coverage": coverage, "relevance": rng.random(), "meaning": 0.0,
                                   "shape": 1.0, "agreement": 1.0}})
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"cases": cases}), encoding="utf-8")
    out = io.StringIO()
    call_command("calibrate_confidence", str(report), "--target", "0.9", "--margin", "0", stdout=out)
    text = out.getvalue()
    assert "held-out AUC" in text and "[confidence]" in text and "[confidence.weights]" in text
    assert "coverage = " in text


def test_the_command_needs_reports_with_cases(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"run_id": 1}), encoding="utf-8")
    with pytest.raises(CommandError, match="逐题"):
        call_command("calibrate_confidence", str(old), stdout=io.StringIO())
