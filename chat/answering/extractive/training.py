"""Training the learned scorer (`manage.py train_answerer`) on public Chinese reading comprehension.

Data: SQuAD-style files of CMRC 2018 (`ymcui/cmrc2018`: the trial split, and dev paragraphs that
none of the held-out evaluation questions come from). Every question is asked of a small context
as retrieval would hand it over: its own paragraph among the paragraphs of other articles that
share the most of its words (hard distractors), at a rank drawn as retrieval ranks the answer;
one question in four is asked without the answer ("no answer here"): of its own paragraph with the
sentences that answer taken out, or of other articles only; one in five is written in
traditional characters by the project's converter. Each candidate unit the answerer finds is a
row of `features.FEATURES`, labelled by whether it holds a reference answer.

Paragraphs are split 80/20 into training and validation (never a paragraph in both). A logistic
model with an L2 penalty is fitted by Newton's method on standardised rows; the threshold of the
best unit's probability is the one that, on validation, answers the most questions right for each
unanswerable one it answers (one costs `wrong_cost` answerable ones). Everything printed and
stored is reproducible from the seed and the data's digests.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import opencc

from ..request import AnswerRequest, AnswerSource
from .composer import ExtractiveAnswerer
from .features import FEATURES
from .scorer import LearnedScorer

VERSION_PREFIX = "cmrc-lr"
CONTEXT_SOURCES = 4  # sources per question, as the pipeline's final context holds about that many
UNANSWERABLE_SHARE = 0.25
# Of those, asked of their own paragraph with the sentences that answer taken out: the evidence is
# about the subject and does not say the answer (the hard case: "年终奖" asked of the salary rules).
STRIPPED_SHARE = 0.6
TRADITIONAL_SHARE = 0.2
MASK_MEANING_SHARE = 0.3  # rows trained as if no embedder were configured
VALIDATION_SHARE = 0.2
# Where retrieval puts the paragraph that answers: first most of the time.
GOLD_RANKS = (0, 0, 0, 0, 0, 0, 1, 1, 2, 3)


@dataclass(frozen=True)
class Question:
    id: str
    text: str
    answers: tuple[str, ...]


@dataclass(frozen=True)
class Paragraph:
    id: str
    title: str
    text: str
    questions: tuple[Question, ...]


@dataclass
class Rows:
    """Feature rows with their labels, grouped by the question they came from."""

    x: list[np.ndarray] = field(default_factory=list)
    y: list[np.ndarray] = field(default_factory=list)
    hand_best: list[int] = field(default_factory=list)  # index of the hand-tuned first unit per group
    answerable: list[bool] = field(default_factory=list)
    cases: list[Case] = field(default_factory=list)  # every request asked, for the end-to-end check


@dataclass(frozen=True)
class Case:
    request: AnswerRequest
    answers: tuple[str, ...]
    answerable: bool


def read_squad(path: Path) -> list[Paragraph]:
    data = json.loads(path.read_text(encoding="utf-8"))
    paragraphs = []
    for article in data["data"]:
        for paragraph in article["paragraphs"]:
            questions = tuple(
                Question(q["id"], q["question"].strip(), tuple(dict.fromkeys(a["text"].strip() for a in q["answers"] if a["text"].strip())))
                for q in paragraph["qas"] if q.get("answers")
            )
            paragraphs.append(Paragraph(paragraph["id"], article.get("title", ""), paragraph["context"].strip(), questions))
    return paragraphs


def held_out_paragraphs(qrels: Path) -> set[str]:
    """Paragraph ids the evaluation set's questions are answered from (`qrels.jsonl`)."""
    if not qrels.exists():
        return set()
    return {json.loads(line)["doc_id"] for line in qrels.read_text(encoding="utf-8").splitlines() if line.strip()}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_rows(paragraphs: Sequence[Paragraph], answerer: ExtractiveAnswerer, *, seed: int,
               progress: Callable[[int, int], None] | None = None) -> Rows:
    rng = random.Random(seed)
    to_traditional = opencc.OpenCC("s2t")
    grams = [_bigrams(p.title + p.text) for p in paragraphs]
    rows = Rows()
    total = sum(len(p.questions) for p in paragraphs)
    done = 0
    for index, paragraph in enumerate(paragraphs):
        for question in paragraph.questions:
            done += 1
            if progress is not None:
                progress(done, total)
            others = _distractors(question.text, index, grams, count=CONTEXT_SOURCES)
            answerable = rng.random() >= UNANSWERABLE_SHARE
            stripped = None if answerable or rng.random() >= STRIPPED_SHARE else _without_answer(paragraph, question)
            keep = CONTEXT_SOURCES - 1 if answerable or stripped is not None else CONTEXT_SOURCES
            chosen = [paragraphs[i] for i in others[:keep]]
            if answerable or stripped is not None:
                chosen.insert(min(rng.choice(GOLD_RANKS), len(chosen)), paragraph if answerable else stripped)
            text = to_traditional.convert(question.text) if rng.random() < TRADITIONAL_SHARE else question.text
            sources = [AnswerSource(number=n, kind="chunk", title=p.title, text=p.text) for n, p in enumerate(chosen, 1)]
            rows.cases.append(Case(AnswerRequest(question=text, sources=tuple(sources)), question.answers, answerable))
            found = answerer.candidates(sources, text)
            if not found.scored:
                continue
            x = found.rows.copy()
            if rng.random() < MASK_MEANING_SHARE:
                x[:, FEATURES.index("meaning")] = 0.0
                x[:, FEATURES.index("meaning_known")] = 0.0
            labels = np.asarray([
                1.0 if answerable and _holds(item.unit.text, chosen[item.unit.order], item.unit.order, paragraph,
                                             question.answers) else 0.0
                for item in found.scored
            ])
            rows.x.append(x)
            rows.y.append(labels)
            rows.hand_best.append(int(np.argmax(x[:, FEATURES.index("hand_best")])))
            rows.answerable.append(answerable)
    return rows


def fit(x: np.ndarray, y: np.ndarray, *, l2: float = 1.0, iterations: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean, scale, coef, intercept) of an L2-penalised logistic regression (Newton's method)."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[-1] = 0.0  # the intercept is not shrunk
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -30, 30)))
        gradient = z.T @ (p - y) + penalty * w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return mean, scale, w[:-1], float(w[-1])


@dataclass(frozen=True)
class Outcome:
    best_probability: float
    right: bool  # the unit ranked first holds a reference answer
    answerable: bool


def outcomes(rows: Rows, chances: Iterable[np.ndarray], *, hand: bool = False) -> list[Outcome]:
    found = []
    for labels, p, hand_best, answerable in zip(rows.y, chances, rows.hand_best, rows.answerable, strict=True):
        first = hand_best if hand else int(np.argmax(p))
        found.append(Outcome(float(p.max()), bool(labels[first]), answerable))
    return found


def reliability(found: Sequence[Outcome], thresholds: Sequence[float]) -> list[dict]:
    """Per threshold: answerable questions answered right / wrong, unanswerable ones answered."""
    table = []
    answerable = sum(o.answerable for o in found) or 1
    unanswerable = sum(not o.answerable for o in found) or 1
    for threshold in thresholds:
        kept = [o for o in found if o.best_probability >= threshold]
        right = sum(o.answerable and o.right for o in kept)
        wrong = sum(o.answerable and not o.right for o in kept)
        intruded = sum(not o.answerable for o in kept)
        table.append({"threshold": round(threshold, 3), "right": right, "wrong": wrong, "unanswerable_answered": intruded,
                      "right_share": round(right / answerable, 4), "declined_unanswerable": round(1 - intruded / unanswerable, 4),
                      "precision": round(right / len(kept), 4) if kept else 1.0})
    return table


def choose_threshold(table: Sequence[dict], *, wrong_cost: float) -> float:
    """The threshold that answers the most answerable questions for each unanswerable one it
    answers (which costs `wrong_cost` of them). A wrong first line on an answerable question is
    not counted against it: the evidence is there, and declining would not mend the ranking."""
    def utility(row: dict) -> float:
        return row["right"] + row["wrong"] - wrong_cost * row["unanswerable_answered"]
    return max(table, key=lambda row: (utility(row), -row["threshold"]))["threshold"]


def split(paragraphs: Sequence[Paragraph], *, seed: int) -> tuple[list[Paragraph], list[Paragraph]]:
    def validation(paragraph: Paragraph) -> bool:
        value = int(hashlib.sha256(f"{seed}:{paragraph.id}".encode()).hexdigest()[:8], 16)
        return value / 0xFFFFFFFF < VALIDATION_SHARE
    return [p for p in paragraphs if not validation(p)], [p for p in paragraphs if validation(p)]


def train(paragraphs: Sequence[Paragraph], answerer: ExtractiveAnswerer, *, seed: int, wrong_cost: float,
          digests: dict[str, str], progress: Callable[[int, int], None] | None = None) -> tuple[LearnedScorer, dict]:
    training, validation = split(paragraphs, seed=seed)
    train_rows = build_rows(training, answerer, seed=seed, progress=progress)
    valid_rows = build_rows(validation, answerer, seed=seed + 1, progress=progress)
    x, y = np.vstack(train_rows.x), np.concatenate(train_rows.y)
    mean, scale, coef, intercept = fit(x, y)
    scorer = LearnedScorer(version="", features=FEATURES, mean=mean, scale=scale, coef=coef, intercept=intercept,
                           threshold=0.5, metadata={})
    chances = [scorer.probabilities(rows) for rows in valid_rows.x]
    learned = outcomes(valid_rows, chances)
    hand = outcomes(valid_rows, chances, hand=True)
    table = reliability(learned, [i / 40 for i in range(1, 40)])
    threshold = choose_threshold(table, wrong_cost=wrong_cost)
    answerable = [o for o in learned if o.answerable] or [Outcome(0, False, True)]
    learned_answerer = ExtractiveAnswerer(meaning=answerer.meaning, scorer=replace(scorer, threshold=threshold))
    metrics = {
        "training": {"paragraphs": len(training), "questions": len(train_rows.y), "rows": int(len(y)),
                     "positive_rows": int(y.sum())},
        "validation": {
            "paragraphs": len(validation), "questions": len(valid_rows.y),
            "first_unit_right_learned": round(sum(o.right for o in answerable) / len(answerable), 4),
            "first_unit_right_hand_tuned": round(
                sum(o.right for o in hand if o.answerable) / len(answerable), 4),
            "reliability": table,
            "answers_learned": answer_metrics(learned_answerer, valid_rows.cases),
            "answers_hand_tuned": answer_metrics(answerer, valid_rows.cases),
        },
        "threshold": threshold, "wrong_cost": wrong_cost,
    }
    fingerprint = hashlib.sha256(json.dumps([seed, sorted(digests.items()), coef.tolist()]).encode()).hexdigest()[:8]
    metadata = {"seed": seed, "data": digests, "metrics": metrics}
    scorer = LearnedScorer(version=f"{VERSION_PREFIX}-{fingerprint}", features=FEATURES, mean=mean, scale=scale,
                           coef=coef, intercept=intercept, threshold=threshold, metadata=metadata)
    return scorer, metrics


def _bigrams(text: str) -> frozenset[str]:
    return frozenset(text[i : i + 2] for i in range(len(text) - 1))


def _distractors(question: str, own: int, grams: Sequence[frozenset[str]], *, count: int) -> list[int]:
    """The paragraphs of other articles sharing the most of the question's character bigrams."""
    asked = _bigrams(question)
    ranked = sorted((i for i in range(len(grams)) if i != own), key=lambda i: (-len(asked & grams[i]), i))
    return ranked[:count]


_SENTENCE = re.compile(r"[^。！？；!?;]+[。！？；!?;]?")


def _without_answer(paragraph: Paragraph, question: Question) -> Paragraph | None:
    """The paragraph without the sentences that hold a reference answer; None when nothing else is
    left, or an answer still stands in what is."""
    kept = [s for s in _SENTENCE.findall(paragraph.text) if not _contains(s, question.answers)]
    text = "".join(kept).strip()
    if len(text) < 20 or _contains(text, question.answers):
        return None
    return Paragraph(f"{paragraph.id}-stripped", paragraph.title, text, ())


def _holds(unit_text: str, source, order: int, paragraph: Paragraph, answers: Sequence[str]) -> bool:
    if source is not paragraph:
        return False
    text = "".join(unit_text.split())
    return any("".join(a.split()) and "".join(a.split()) in text for a in answers)


DECLINE = "根据当前知识库无法确定"


def answer_metrics(answerer: ExtractiveAnswerer, cases: Sequence[Case]) -> dict:
    """End to end, as a reader reads the answers: the first line holding a reference answer, any
    line holding one, declines; and of the questions asked without their paragraph, declines."""
    answerable = [c for c in cases if c.answerable]
    unanswerable = [c for c in cases if not c.answerable]
    first = contained = declined = refused = 0
    for case in answerable:
        answer = _plain(answerer.answer(case.request))
        declined += answer.startswith(DECLINE)
        first += _contains(answer.split("\n", 1)[0], case.answers)
        contained += _contains(answer, case.answers)
    for case in unanswerable:
        refused += answerer.answer(case.request).startswith(DECLINE)
    n, m = len(answerable) or 1, len(unanswerable) or 1
    return {"answerable": len(answerable), "first_line": round(first / n, 4), "containment": round(contained / n, 4),
            "declined": round(declined / n, 4), "unanswerable": len(unanswerable),
            "unanswerable_declined": round(refused / m, 4)}


def _plain(answer: str) -> str:
    return re.sub(r"\[来源 \d+\]\(citation://\d+\)", "", answer)


def _contains(text: str, answers: Sequence[str]) -> bool:
    squashed = "".join(text.split())
    return any("".join(a.split()) and "".join(a.split()) in squashed for a in answers)
