"""The learned scorer of the extractive answerer: its weights, its training, its decision."""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.core.management import call_command

from chat.answering.extractive import ExtractiveAnswerer
from chat.answering.extractive import training
from chat.answering.extractive.features import FEATURES
from chat.answering.extractive.scorer import WEIGHTS_PATH, LearnedScorer, WeightsMismatch
from chat.answering.request import AnswerRequest, AnswerSource


def test_the_committed_weights_are_for_the_features_the_code_computes():
    # when
    scorer = LearnedScorer.load(WEIGHTS_PATH)
    # then: trained on these features, with the run's seed, data digests and validation metrics
    assert scorer.features == FEATURES and scorer.coef.shape == (len(FEATURES),)
    assert 0.0 < scorer.threshold < 1.0
    assert scorer.metadata["seed"] and scorer.metadata["data"]
    assert scorer.metadata["metrics"]["validation"]["questions"] > 100


def test_weights_for_other_features_are_refused(tmp_path):
    # given: weights trained before a feature was added
    data = LearnedScorer.load(WEIGHTS_PATH).as_dict()
    data["features"] = data["features"][:-1]
    path = tmp_path / "weights.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    # when / then
    with pytest.raises(WeightsMismatch):
        LearnedScorer.load(path)


def test_fit_recovers_a_separating_direction():
    # given: labels decided by the first of three features
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2000, 3))
    y = (x[:, 0] + 0.1 * rng.normal(size=2000) > 0).astype(float)
    # when
    _mean, _scale, coef, _intercept = training.fit(x, y)
    # then
    assert coef[0] > 5 * max(abs(coef[1]), abs(coef[2]))


def test_the_threshold_is_chosen_on_the_reliability_table():
    # given: answering below 0.5 adds 10 answerable questions and 20 unanswerable ones
    table = [
        {"threshold": 0.3, "right": 90, "wrong": 10, "unanswerable_answered": 25},
        {"threshold": 0.5, "right": 82, "wrong": 8, "unanswerable_answered": 5},
        {"threshold": 0.7, "right": 60, "wrong": 5, "unanswerable_answered": 0},
    ]
    # when / then: with a wrong answer costing two right ones, 0.5 answers the most for its cost
    assert training.choose_threshold(table, wrong_cost=2.0) == 0.5
    assert training.choose_threshold(table, wrong_cost=0.1) == 0.3


TOPICS = ["路由器", "交换机", "打印机", "投影仪", "显示器", "扫描仪"]


def paragraph(n: int) -> tuple[str, str, list[tuple[str, str]]]:
    """An article of its own: a product, its warranty and its price, and two questions on them."""
    name = f"{TOPICS[n % len(TOPICS)]}{chr(0x4e00 + 97 * n)}{chr(0x4e00 + 31 * n + 7)}型"
    context = (f"{name}是公司第{n + 1}代产品，主要面向中小企业。{name}的保修期为 {n + 6} 个月，保修期内免费更换。"
               f"它的建议零售价为 {100 + 10 * n} 元，企业批量采购另有折扣。")
    return name, context, [(f"{name}的保修期是多久？", f"{n + 6} 个月"), (f"{name}的建议零售价是多少？", f"{100 + 10 * n} 元")]


SQUAD = {"version": "v1.0", "data": [
    {"title": title, "paragraphs": [{"id": f"P{n}", "context": context, "qas": [
        {"id": f"P{n}_Q{m}", "question": question, "answers": [{"text": answer, "answer_start": context.index(answer)}]}
        for m, (question, answer) in enumerate(qas)
    ]}]}
    for n, (title, context, qas) in enumerate(paragraph(n) for n in range(40))
]}


def test_train_answerer_writes_weights_the_answerer_loads(tmp_path):
    # given: a small SQuAD-style file of 40 articles alike in their words
    data = tmp_path / "squad.json"
    data.write_text(json.dumps(SQUAD, ensure_ascii=False), encoding="utf-8")
    out = tmp_path / "weights.json"
    # when
    call_command("train_answerer", "--data", str(data), "--no-meaning", "--held-out", str(tmp_path / "none.jsonl"),
                 "--out", str(out), "--seed", "1")
    # then: reproducible weights the answerer reads, with what they were trained on
    scorer = LearnedScorer.load(out)
    assert scorer.metadata["data"] == {"squad.json": training.digest(data)}
    name, context, _qas = paragraph(3)
    answer = ExtractiveAnswerer(scorer=scorer).answer(AnswerRequest(question=f"{name}的保修期是多久？", sources=(
        AnswerSource(number=1, kind="chunk", title=name, text=context),
    )))
    assert "9 个月" in answer.splitlines()[0]
    again = tmp_path / "again.json"
    call_command("train_answerer", "--data", str(data), "--no-meaning", "--held-out", str(tmp_path / "none.jsonl"),
                 "--out", str(again), "--seed", "1")
    assert json.loads(again.read_text())["coef"] == json.loads(out.read_text())["coef"]


def test_below_the_threshold_the_answer_is_the_decline():
    # given: a scorer that never reaches its threshold
    scorer = LearnedScorer.load(WEIGHTS_PATH)
    strict = LearnedScorer(version="strict", features=scorer.features, mean=scorer.mean, scale=scorer.scale,
                           coef=scorer.coef, intercept=scorer.intercept, threshold=1.01, metadata={})
    request = AnswerRequest(question="年假有几天？", sources=(
        AnswerSource(number=1, kind="chunk", title="年假", text="入职满一年的员工每年享有 15 天带薪年假。"),))
    # when / then
    assert ExtractiveAnswerer(scorer=scorer).answer(request).startswith("入职满一年的员工每年享有 15 天带薪年假。")
    assert ExtractiveAnswerer(scorer=strict).answer(request).startswith("根据当前知识库无法确定")
