"""What the learned scorer reads of a candidate unit: numbers the composer already computes (its
word support, how much of the question the unit covers read in its context, whether it has the
shape of the answer asked for, where it stands, whether its source names the question's
distinctive words, how near it means the question), one row per unit in the order of FEATURES.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engines.lexical import coverage, mention_share

from .candidates import SourceParts, Unit
from .question import ANSWER_SHAPES
from .tuning import TUNING

FEATURES = (
    "support",  # IDF share of the question the unit holds, with credit for its title and header
    "score_ratio",  # its hand-tuned score over the best one's
    "own_share",  # IDF share of the question in the unit's own words
    "coverage",  # share of the question covered by the unit read in its context (title, lead-in)
    "unit_coverage",  # the same, the unit alone
    "shape_wanted",  # the question asks for a number, a place, a cause, a price or a colour
    "shape_match",  # ... and the unit has that shape
    "table_row",
    "caption",
    "lead",  # a line that introduces what follows ("须满足以下规则：")
    "asks",  # the unit is itself a question
    "source_rank",  # 1 / (1 + its source's retrieval rank)
    "early_in_source",  # 1 / (1 + its position in the source)
    "on_topic",  # its source names the question's distinctive words
    "key_share",  # share of those words in the unit itself
    "length",  # log(1 + characters) / 6
    "meaning",  # calibrated similarity of unit and question (0 when not known)
    "meaning_known",
    "hand_best",  # the hand-tuned ranking's first
    "source_coverage",  # share of the question its whole source covers (title and text)
    "key_term_in_source",  # the question's most specific term is in its source
)


@dataclass(frozen=True)
class Scored:
    unit: Unit
    matched: frozenset[str]  # question terms the unit (or, for a row, its header) contains
    support: float
    score: float
    own: float  # weight of the question terms in the unit's own text: ranks rows of a table
    on_topic: bool = True  # its source names the question's distinctive words


@dataclass(frozen=True)
class QuestionView:
    """What the features read of the question, computed once per answer."""

    terms: tuple[str, ...]  # content terms (`engines.lexical.content_terms`)
    keys: tuple[str, ...]  # distinctive words
    wants: frozenset[str]  # answer shapes asked for
    total_weight: float  # sum of the question terms' weights over the context


def feature_rows(scored: Sequence[Scored], parts: Sequence[SourceParts], question: QuestionView,
                 meaning: dict[int, float]) -> np.ndarray:
    """One row per scored unit; `meaning` maps id(unit) to its calibrated similarity."""
    best = max((s.score for s in scored), default=0.0) or 1.0
    hand_best = min(scored, key=lambda s: (-s.score, s.unit.order, s.unit.position)) if scored else None
    shapes = [kind for kind in question.wants if kind != "image"]
    by_source: dict[int, tuple[float, float]] = {}
    for part in parts:
        if question.terms:
            whole = coverage(list(question.terms), f"{part.source.title}\n{part.source.text}")
            by_source[part.order] = (whole.score, 1.0 if whole.key_term_found else 0.0)
        else:
            by_source[part.order] = (1.0, 1.0)
    rows = []
    for item in scored:
        unit = item.unit
        similarity = meaning.get(id(unit))
        text = unit.text
        keys_in_unit = [k for k in question.keys if mention_share(k, unit.plain)]
        rows.append([
            item.support,
            item.score / best,
            item.own / question.total_weight if question.total_weight else 0.0,
            coverage_in_context(unit, parts, question.terms),
            coverage(list(question.terms), text).score if question.terms else 0.0,
            1.0 if shapes else 0.0,
            1.0 if any(ANSWER_SHAPES[kind].search(text) for kind in shapes) else 0.0,
            1.0 if unit.table is not None else 0.0,
            1.0 if unit.caption else 0.0,
            1.0 if unit.lead else 0.0,
            1.0 if unit.asks else 0.0,
            1.0 / (1 + unit.order),
            1.0 / (1 + unit.position),
            1.0 if item.on_topic else 0.0,
            len(keys_in_unit) / len(question.keys) if question.keys else 1.0,
            math.log1p(len(text)) / 6,
            max(-1.0, min(1.5, similarity)) if similarity is not None else 0.0,
            1.0 if similarity is not None else 0.0,
            1.0 if item is hand_best else 0.0,
            *by_source[unit.order],
        ])
    return np.asarray(rows, dtype=np.float64).reshape(len(rows), len(FEATURES))


def coverage_in_context(unit: Unit, parts: Sequence[SourceParts], terms: Sequence[str]) -> float:
    """Share of the question the unit covers, read as a reader reads it: under its source's title
    and its table's header, after the line that introduces it, with the question sentence before
    it and the clauses of its own line before it."""
    if not terms:
        return 1.0
    part = parts[unit.order]
    header = part.tables[unit.table].header if unit.table is not None else ""
    # A list item is read under the line that introduces it, as when it was scored.
    leads = [
        u.text for u in part.units
        if u.lead and u.text.rstrip().endswith(("：", ":")) and 0 < unit.line - u.line <= TUNING.list_lines
    ]
    # An answer is read with the question sentence before it ("常见问题：…？" then "标准答案：…").
    before = [u.text for u in part.units if u.position == unit.position - 1 and u.asks]
    # A clause is read with the clauses of its line before it: "公司电脑默认禁用 USB 存储设备；" then
    # "确需使用的，须经审批，开通期限最长 30 天。" is one rule about USB storage.
    before += [u.text for u in part.units
               if u.line == unit.line and u.position < unit.position and u.table is None and not u.asks]
    context = "\n".join((part.source.title, header, *leads[-1:], *before, unit.text))
    return coverage(list(terms), context).score
