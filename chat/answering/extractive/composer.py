"""The offline answerer: the evidence's sentences and table rows that best answer the question,
quoted verbatim and cited, or the decline when none does. No network, no model weights beyond
the embedder's; the same evidence gives the same answer in every process."""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from engines.glossary import is_foreign, rendering
from engines.lexical import (
    CJK_CHARS,
    FUNCTION_WORDS,
    content_terms,
    mention_share,
    model_code_spans,
    model_codes,
    term_weight,
)
from engines.ports import Embedder, ProviderError
from engines.providers.local import lexical_features, normalise, unit_features
from engines.synonyms import synonyms
from engines.tokens import count_tokens

from ..focus import ItemFocus
from ..request import AnswerRequest, AnswerSource
from .question import (
    ANSWER_SHAPES,
    IMAGE_QUESTION,
    key_words,
    question_terms as terms_of_question,
    term_weights,
    wanted_shapes,
)
from .features import QuestionView, Scored, coverage_in_context, feature_rows
from .scorer import WEIGHTS_PATH, LearnedScorer
from .quantities import Quantity, fit, stated_quantities
from .tuning import TUNING
from .candidates import Asset, SourceParts, Table, Unit, source_parts, squash

logger = logging.getLogger(__name__)

_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
_WORD_CHAR = re.compile(r"\w")

# Streamed whole: a citation marker, an image line.
_WHOLE = re.compile(r"\[来源 \d+\]\(citation://\d+\)|^!\[[^\]\n]*\]\(asset://\d+\)$", re.M)




@dataclass(frozen=True)
class Candidates:
    parts: list[SourceParts]
    scored: list[Scored]  # the units the scorer reads: the words' first few
    every: list[Scored]  # every candidate unit (a chosen row's table shows its rows from these)
    weights: dict[str, float]
    rows: np.ndarray  # feature rows of `scored`, in order
    question_terms: set[str]


@lru_cache(maxsize=1)
def _default_scorer() -> LearnedScorer | None:
    """The committed weights; None (the hand-tuned ranking) when there are none."""
    return LearnedScorer.load(WEIGHTS_PATH) if WEIGHTS_PATH.exists() else None


class ExtractiveAnswerer:
    """Answers by quoting the context sentences (and table rows) that best support the question.

    It reads the typed sources of an `AnswerRequest`. Each source is cut into units
    (`candidates`): sentences, and the rows of its GFM tables. A unit's support is the IDF-weighted share of the
    question's content words and bigrams it holds (IDF over the context's units), plus credit for
    question terms found only around it: in the source title (which scopes every sentence under
    it, so nearly full credit), in a row's table header (likewise), elsewhere in the source
    (0.3). A unit must hold a question word itself (or, for a row, its header must), and support
    below `min_support` does not count. Its score is the support, raised a little when the unit
    has the shape of the answer asked for (a number for "多少/哪一年", a cause for "为什么", a
    place for "在哪里", a price, a picture caption for image questions) and lowered for a
    sentence that is itself a question (in an FAQ the sentence after it answers, and earns its
    terms) and for sources that mention none of the question's distinctive words.

    The first line is the best-scored unit: it is the one that answers. At most two more lines
    follow, only when they come close in score or cover question terms not covered yet, and only
    within `max_chars` characters (the first line always shows, whole). Each line is a verbatim
    substring of its source followed by `[来源 N](citation://N)`. A table row comes as a small
    GFM table: header, separator, and the table's rows that match the question best by their
    own cells (at most five), verbatim, with the marker on its own line after a blank line. The
    image lines (`![说明](asset://ID)`) of a cited source are added, verbatim, when the question
    asks about a picture or a quoted line is an image caption.

    Markers only ever carry the sources' numbers, and text that looks like our markup
    (`citation://`, `asset://`, `[来源 N]`) is never quoted. When no unit is supported, or the
    context mentions none of the question's distinctive words (names, rare terms), the answer
    says the knowledge base cannot settle the question. It writes nothing of its own beyond that.
    Answers are deterministic: the same evidence gives the same answer in every process.
    """

    name = "local-extractive"
    generative = False

    def __init__(
        self, *, min_support: float = 0.25, max_chars: int = 200, meaning: Embedder | None = None,
        min_meaning: float = TUNING.min_meaning, min_coverage: float = TUNING.min_coverage,
        scorer: LearnedScorer | None | str = None,
    ) -> None:
        self.min_support = min_support
        self.max_chars = max_chars
        # A calibrated embedder (its `similarity_range` set) to fall back on when no sentence
        # shares enough words with the question: a reworded question still means its answer.
        self.meaning = meaning if meaning is not None and meaning.similarity_range else None
        self.min_meaning = min_meaning
        self.min_coverage = min_coverage
        # The hand-tuned ranking and gates (None, what the product answers with), or the learned
        # scorer ranking the units and deciding ("default": the committed weights), which
        # `bench-answers` and the training run compare with it.
        self.scorer = _default_scorer() if scorer == "default" else scorer
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def stream(self, request: AnswerRequest, *, max_tokens: int = 1024, temperature: float = 0.2) -> Iterator[str]:
        return _deltas(self.answer(request, max_tokens=max_tokens))

    def answer(self, request: AnswerRequest, *, max_tokens: int = 1024) -> str:
        """The whole answer's text (markdown with citation markers)."""
        focus = request.focus if request.focus is not None else ItemFocus.of_question(request.question)
        return self._answer(list(request.sources), request.question, focus, max_tokens=max_tokens)

    # -- answer --

    def _answer(self, sources: list[AnswerSource], question: str, focus: ItemFocus, *, max_tokens: int) -> str:
        if is_foreign(question):
            # The sources are Chinese: compare them with the Chinese words the question names.
            question = rendering(question, "\n".join(f"{s.title}\n{s.text}" for s in sources)) or question
        missing = unmentioned_feature(question, sources)
        if missing:
            # "星河X3 Pro 支持 5G 手机卡吗？" of sources that never mention 5G: whatever else they say
            # of the X3 Pro ("支持 Mesh") answers another question.
            return f"根据当前知识库无法确定该问题的答案：资料中没有提到“{missing}”。"
        if self.scorer is not None:
            return self._answer_learned(sources, question, focus, max_tokens=max_tokens)
        parts = [source_parts(source, order) for order, source in enumerate(sources)]
        question_terms = terms_of_question(question)
        scored, weights = self._score(parts, question, question_terms, focus)
        by_words = bool(scored)
        if not scored and self.meaning is not None:
            try:
                scored, weights = self._by_meaning(parts, question, question_terms)
            except ProviderError as exc:
                # The fallback is optional: without the embedder the answer is the decline the
                # words alone give, not a failed turn.
                logger.warning("meaning fallback unavailable (%s): declining", exc.code)
                scored = []
        if by_words and len(scored) > 1 and self.meaning is not None:
            try:
                scored = self._settle_by_meaning(scored, parts, question)
            except ProviderError as exc:
                # Optional like the fallback: the order the words gave stands.
                logger.warning("meaning tie-break unavailable (%s): keeping the lexical order", exc.code)
        if not scored:
            return _insufficient(question)
        chosen = _lead_with_comparison(self._choose(scored, weights), scored, parts, question, focus.codes)
        if by_words and not _covers_question(chosen[0].unit, parts, question, self.min_coverage):
            # The best sentence, read under its source's title, says too little of what was
            # asked: quoting it would answer another question.
            return _insufficient(question)
        blocks = self._render(chosen, scored, parts, question, question_terms, focus, max_tokens)
        return _join(blocks)

    def _answer_learned(self, sources: list[AnswerSource], question: str, focus: ItemFocus, *,
                        max_tokens: int) -> str:
        """The learned scorer's probability ranks the units and decides: below its threshold the
        evidence does not answer, whatever single word it lacks or holds."""
        found = self.candidates(sources, question, focus)
        if not found.scored:
            return _insufficient(question)
        assert self.scorer is not None
        chances = self.scorer.probabilities(found.rows)
        if float(chances.max()) < self.scorer.threshold:
            return _insufficient(question)
        # The scorer picks the first line; the lines that may follow it are chosen as before, by
        # how close their hand-tuned score comes and what they add.
        first = found.scored[int(chances.argmax())]
        top = max(item.score for item in found.every)
        scored = [replace(item, score=top * 1.001) if item is first else item for item in found.every]
        chosen = _lead_with_comparison(self._choose(scored, found.weights), scored, found.parts, question,
                                       focus.codes)
        blocks = self._render(chosen, scored, found.parts, question, found.question_terms, focus, max_tokens)
        return _join(blocks)

    def candidates(self, sources: Sequence[AnswerSource], question: str,
                   focus: ItemFocus | None = None) -> Candidates:
        """Every unit the words anchor to the question (or, when none, the nearest in meaning),
        with its feature row: what the learned scorer reads, at answer time and in training."""
        parts = [source_parts(source, order) for order, source in enumerate(sources)]
        question_terms = terms_of_question(question)
        focus = focus if focus is not None else ItemFocus.of_question(question)
        scored, weights = self._score(parts, question, question_terms, focus, lenient=True)
        meaning: dict[int, float] = {}
        if self.meaning is not None:
            try:
                if scored:
                    meaning = self._meanings(scored, parts, question)
                else:
                    scored, weights = self._by_meaning(parts, question, question_terms)
                    meaning = {id(item.unit): item.own for item in scored}
            except ProviderError as exc:
                # Meaning is one feature among many: without the embedder the words decide.
                logger.warning("meaning unavailable (%s): scoring on words", exc.code)
        terms = tuple(content_terms(question))
        view = QuestionView(terms=terms, keys=tuple(key_words(question)), wants=wanted_shapes(question),
                            total_weight=math.fsum(weights.values()))
        # The scorer reads the units the words rank first: one far down that list is seldom the
        # answer (of 446 CMRC validation questions, the first unit holding it ranked 1st in 379,
        # 2nd–4th in 43, 5th–12th in 2, lower in 1, nowhere in 21), and each row costs a count.
        ranked = sorted(scored, key=lambda s: (-s.score, s.unit.order, s.unit.position))[:TUNING.scored_candidates]
        rows = feature_rows(ranked, parts, view, meaning)
        return Candidates(parts=parts, scored=ranked, every=scored, weights=weights, rows=rows,
                          question_terms=question_terms)

    @property
    def threshold(self) -> float:
        return self.scorer.threshold if self.scorer is not None else 1.0

    def chances(self, question: str, sources: Sequence[AnswerSource]) -> list[float]:
        """Per source, the learned chance that its best unit holds the answer (`EvidenceJudge`);
        zeros without a scorer."""
        if self.scorer is None or not sources:
            return [0.0] * len(sources)
        if is_foreign(question):
            question = rendering(question, "\n".join(f"{s.title}\n{s.text}" for s in sources)) or question
        found = self.candidates(sources, question)
        best = [0.0] * len(sources)
        for item, chance in zip(found.scored, self.scorer.probabilities(found.rows).tolist(), strict=True):
            best[item.unit.order] = max(best[item.unit.order], chance)
        return best

    def _meanings(self, scored: list[Scored], parts: list[SourceParts], question: str) -> dict[int, float]:
        """The calibrated similarity to the question of the units the words rank first (a few: each
        costs an embedding the first time it is seen)."""
        assert self.meaning is not None
        ranked = sorted(scored, key=lambda s: (-s.score, s.unit.order, s.unit.position))[:TUNING.meaning_candidates]
        meanings = self._calibrated([s.unit for s in ranked], parts, question)
        return {id(s.unit): meaning for s, meaning in zip(ranked, meanings, strict=True)}

    def _calibrated(self, units: Sequence[Unit], parts: list[SourceParts], question: str) -> list[float]:
        """Each unit's calibrated similarity to the question (a row read under its header),
        unclipped: above 1 is nearer than a typical answer."""
        assert self.meaning is not None
        texts = [
            f"{parts[u.order].tables[u.table].header} {u.text}" if u.table is not None else u.text
            for u in units
        ]
        query = np.asarray(self.meaning.embed_query(normalise(question)), dtype=np.float64)
        matrix = self._sentence_vectors(texts)
        cosines = matrix @ query / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query) + 1e-12)
        low, high = self.meaning.similarity_range
        return [(cosine - low) / (high - low) for cosine in cosines.tolist()]

    def _score(
        self, parts: list[SourceParts], question: str, question_terms: set[str], focus: ItemFocus, *,
        lenient: bool = False,
    ) -> tuple[list[Scored], dict[str, float]]:
        """Units the question's words anchor, with their support and hand-tuned score. `lenient`
        (for the learned scorer): sources without the question's distinctive words still give
        candidates, and a lower support floor applies; the scorer weighs both."""
        units = [unit for part in parts for unit in part.units]
        if not question_terms or not units:
            return [], {}
        # The question's distinctive words (names, rare terms): when the context has none of
        # them it speaks about something else, however many common words it shares.
        keys = key_words(question)
        on_topic = {
            part.order: not keys or any(mention_share(key, part.plain) for key in keys)
            for part in parts
        }
        if not any(on_topic.values()) and not lenient:
            return [], {}
        min_support = TUNING.learned_min_support if lenient else self.min_support
        # A unit must share a question word, or a bigram inside one of its longer words ("兴趣"
        # of "兴趣爱好"); bigrams across word boundaries ("要材" of "重要材料") are too weak alone.
        words = [t[2:] for t in question_terms if t.startswith("w:")]
        anchors = {t for t in question_terms if t.startswith("w:")}
        long_words = [w for w in words if len(w) >= 3]
        anchors |= {
            t for t in question_terms if t.startswith("b:") and any(t[2:] in w for w in long_words)
        }
        # A question word spelled out in a sentence is in it, however jieba cut the sentence:
        # "雌狸长65-70厘米" comes out as "雌" + "狸长", and still says 雌狸.
        spelled = [(t, t[2:]) for t in question_terms if t.startswith("w:") and len(t) > 3 and _CJK_RUN.fullmatch(t[2:])]
        holds = {
            id(unit): (question_terms & unit.features) | {t for t, word in spelled if word in unit.plain}
            for unit in units
        }
        weights = term_weights(question_terms, list(holds.values()))
        # A sentence may say the question's word in another word of the same meaning ("负伤" for
        # "受伤"): nearly as good as the word itself, as a title is.
        # Grammar words ("一共", "大约") say nothing of the subject: their synonyms ("累计") less so.
        alternatives = [(t, synonyms(word)) for t, word in spelled if word not in FUNCTION_WORDS]
        alternatives = [(t, others) for t, others in alternatives if others]
        synonymous = {
            id(unit): {t for t, others in alternatives if any(o in unit.plain for o in others)} - holds[id(unit)]
            for unit in units
        } if alternatives else {}
        total = math.fsum(weights.values())
        wants = wanted_shapes(question)
        asked_models = focus.codes
        stated = stated_quantities(question)
        scored: list[Scored] = []
        for part in parts:
            nearby_terms = question_terms & part.terms
            title_terms = question_terms & part.title_terms
            if "image" in wants:
                title_terms |= question_terms & part.caption_terms
            previous: Unit | None = None
            lead: Unit | None = None
            for unit in part.units:
                matched = set(holds[id(unit)])
                # The sentence after a question in the source answers it ("常见问题：…？" then
                # "标准答案：…"): it earns the question's terms as its own.
                if previous is not None and previous.asks and unit.table is None and not unit.asks:
                    matched |= holds[id(previous)]
                previous = unit
                # The items a line ending in a colon introduces ("密码必须满足以下规则：" then
                # "长度至少 12 位；") are about what it names, as rows are about their header.
                inherited: set[str] = set()
                if unit.table is None and not unit.lead and lead is not None and 0 < unit.line - lead.line <= TUNING.list_lines:
                    inherited = holds[id(lead)] - matched
                if unit.lead and unit.text.rstrip().endswith(("：", ":")):
                    lead = unit
                # A row's column names scope it like a title, and may anchor it: "指示灯有哪些
                # 状态" is answered by the rows under "| 指示灯状态 | 含义 |".
                scoped = ((question_terms & unit.header) | inherited) - matched
                said_otherwise = synonymous.get(id(unit), set()) - matched - scoped
                if not (matched | scoped | said_otherwise) & anchors:
                    continue
                if focus.about_others(unit.text):
                    # "星河X3 整机保修 2 年" never answers a question about X3 Pro.
                    continue
                named = model_codes(unit.text) if asked_models else frozenset()
                nearby = nearby_terms - matched - scoped - said_otherwise
                # fsum: exact, so equal evidence gives equal support in every process (a plain
                # sum over a set depends on its order, and ties would flip between runs).
                support = math.fsum(
                    [weights[t] for t in matched]
                    + [weights[t] * TUNING.title_credit for t in scoped]
                    + [weights[t] * TUNING.synonym_credit for t in said_otherwise]
                    + [
                        weights[t] * (TUNING.title_credit if t in title_terms else TUNING.nearby_credit)
                        for t in nearby
                    ]
                ) / total
                if support < min_support:
                    continue
                score = support * _answer_likelihood(unit, wants) * _range_weight(stated, unit.text)
                if asked_models and len(named - asked_models) >= TUNING.range_models:
                    # "适用型号：星河X1 / 星河X3 / 星河X3 Pro / 星河X5 Mesh" names the asked model
                    # among the whole range: it lists, it does not say anything of the one asked.
                    score *= TUNING.range_factor
                if not on_topic[part.order]:
                    score *= TUNING.off_topic_factor
                own = math.fsum(weights[t] for t in matched)
                scored.append(Scored(unit, frozenset(matched | scoped | said_otherwise), support, score, own,
                                     on_topic[part.order]))
        return scored, weights

    def _by_meaning(
        self, parts: list[SourceParts], question: str, question_terms: set[str]
    ) -> tuple[list[Scored], dict[str, float]]:
        """Units whose calibrated dense similarity to the question reaches `min_meaning`, for a
        question no unit supports by words. Codes and numbers the question names ("X7", "P2")
        must appear in the unit's source: meaning alone cannot tell one model from another."""
        assert self.meaning is not None
        codes = [k for k in key_words(question) if not _CJK_RUN.fullmatch(k)]
        units = [
            unit
            for part in parts
            if all(code.lower() in part.plain for code in codes)
            for unit in part.units
            if not unit.asks
        ][:TUNING.meaning_units]
        if not units:
            return [], {}
        meanings = self._calibrated(units, parts, question)
        holds = [question_terms & unit.features for unit in units]
        weights = term_weights(question_terms, holds)
        wants = wanted_shapes(question)
        stated = stated_quantities(question)
        scored = []
        for unit, meaning, held in zip(units, meanings, holds, strict=True):
            # Unclipped: sentences lie nearer their question than whole chunks, and the order
            # among those above the calibrated range still tells the answer from its neighbours.
            if meaning < self.min_meaning:
                continue
            score = meaning * _answer_likelihood(unit, wants) * _range_weight(stated, unit.text)
            scored.append(Scored(unit, frozenset(held), min(1.0, meaning), score, meaning))
        # One line: the words that would tell its neighbours apart are what is missing here.
        return sorted(scored, key=lambda s: (-s.score, s.unit.order, s.unit.position))[:1], weights

    def _settle_by_meaning(
        self, scored: list[Scored], parts: list[SourceParts], question: str
    ) -> list[Scored]:
        """Sentences that the words score close to the best (within `TUNING.close_call`) are told apart
        by meaning: neighbours in one article share the question's words about as well as the
        sentence that answers it ("司马伦被杀…恢复司马晏吴王" against "司马晏被刘曜所杀" for "谁杀了司马晏"),
        and the calibrated dense similarity of each to the question lifts the one that says what
        was asked. Only these few are embedded, so the cost stays a handful of short sentences."""
        assert self.meaning is not None
        ranked = sorted(scored, key=lambda s: (-s.score, s.unit.order, s.unit.position))
        close = [s for s in ranked[:TUNING.close_call_units] if s.score >= ranked[0].score * TUNING.close_call]
        if len(close) < 2:
            return scored
        meanings = self._calibrated([s.unit for s in close], parts, question)
        lifted = {
            id(item): replace(item, score=item.score * (1 + TUNING.meaning_lift * max(0.0, meaning)))
            for item, meaning in zip(close, meanings, strict=True)
        }
        return [lifted.get(id(item), item) for item in scored]

    def _sentence_vectors(self, texts: list[str]) -> np.ndarray:
        """Vectors of context sentences, the ones seen before from a bounded cache: the same
        chunks answer many questions, and embedding their sentences is most of this fallback's
        cost."""
        assert self.meaning is not None
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in dict.fromkeys(texts):
                if text in self._vectors:
                    self._vectors.move_to_end(text)
                    found[text] = self._vectors[text]
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        if missing:
            fresh = {t: np.asarray(v, dtype=np.float64) for t, v in zip(missing, self.meaning.embed_documents(missing), strict=True)}
            found.update(fresh)
            with self._lock:
                self._vectors.update(fresh)
                while len(self._vectors) > TUNING.sentence_cache:
                    self._vectors.popitem(last=False)
        return np.vstack([found[t] for t in texts])

    def _choose(self, scored: list[Scored], weights: dict[str, float]) -> list[Scored]:
        total = math.fsum(weights.values())
        ranked = sorted(scored, key=lambda s: (-s.score, s.unit.order, s.unit.position))
        best = ranked[0]
        chosen = [best]
        covered = set(best.matched)
        seen = {squash(best.unit.text)}
        tables = {(best.unit.order, best.unit.table)} if best.unit.table is not None else set()
        for candidate in ranked[1:]:
            if len(chosen) == TUNING.max_lines or candidate.score < best.score * TUNING.keep_ratio:
                break
            unit = candidate.unit
            key = squash(unit.text)
            if key in seen or (unit.table is not None and (unit.order, unit.table) in tables):
                continue
            gain = math.fsum(weights[t] for t in candidate.matched - covered) / total
            if gain < TUNING.min_gain and candidate.score < best.score * TUNING.close_ratio:
                continue
            if _restates(candidate.unit.text, [c.unit.text for c in chosen]):
                continue
            seen.add(key)
            if unit.table is not None:
                tables.add((unit.order, unit.table))
            chosen.append(candidate)
            covered |= candidate.matched
        return chosen

    def _render(
        self,
        chosen: list[Scored],
        scored: list[Scored],
        parts: list[SourceParts],
        question: str,
        question_terms: set[str],
        focus: ItemFocus,
        max_tokens: int,
    ) -> list[tuple[str, str]]:
        """("text" | "table" | "image", markdown) blocks within the character and token budget."""
        blocks: list[tuple[str, str]] = []
        shown: list[Scored] = []
        chars = tokens = 0
        # The first line told the asked value of the asked item from a table's cells.
        told_cells = False
        for item in chosen:
            unit = item.unit
            marker = f"[来源 {unit.source}](citation://{unit.source})"
            if told_cells and (unit.table is not None or _row_like(unit.text)):
                # A row of the same figures (a PDF's text table repeating the spreadsheet: "内存
                # 256MB 512MB 1GB 2GB", "星河X3 Pro 3年 1年") or of other columns ("尺寸 …")
                # restates or strays from a value already said in a sentence.
                continue
            if unit.table is not None:
                table = parts[unit.order].tables[unit.table]
                rows = _table_rows(item, scored, table, question)
                # The row's own name picks no column: "星河X5 Mesh 多少钱？" does not ask for the
                # "支持 Mesh" column because the item's name holds "Mesh".
                key_terms = unit_features(_cells(rows[0])[0]) if len(rows) == 1 else set()
                asked = _model_columns(table.header, focus.codes) or _asked_columns(table.header, question_terms - key_terms)
                if (not asked and len(rows) == 1 and "money" in wanted_shapes(question)
                        and not _column_matches(table.header, question_terms - key_terms)):
                    # "多少钱？" names no column: the row's prices are what it asks for.
                    asked = _money_columns(rows[0])
                elif asked and "money" in wanted_shapes(question) and all(model_codes(_cells(table.header)[i]) for i in asked):
                    # Items as columns: of their rows, the prices ("多少钱？" names no row).
                    priced = [row for row in rows if any(ANSWER_SHAPES["money"].search(_cells(row)[i]) for i in asked if i < len(_cells(row)))]
                    rows = priced or rows
                compared = _compared_rows(table, question, focus.codes)
                if compared:
                    # "对比 X1、X3、X3 Pro 的价格": the named items' rows, the columns asked for.
                    rows, asked = compared, sorted(_column_matches(table.header, question_terms))
                if asked and len(rows) == 1:
                    # One item, the values asked for: a sentence of those cells, not the row.
                    sentence = _cells_sentence(table.header, rows[0], asked)
                    kind, body, size = "text", sentence + marker, len(sentence)
                    told_cells = not blocks
                else:
                    lines = [table.header, table.separator, *rows]
                    if asked:
                        # Several items compared: their rows, only the columns asked for.
                        lines = [_columns(line, [0, *asked]) for line in lines]
                    kind, body = "table", "\n".join(lines) + "\n\n" + marker
                    size = sum(len(line) for line in lines)
            elif unit.caption and _OCR_DUMP.match(unit.text):
                # The caption OCR wrote ("图片：星河X3Pro背面接口示意图 XINGHEX3PRO 电源DC12V…")
                # is shown as the image it describes, never as a line of text.
                shown.append(item)
                continue
            else:
                text = _unlabelled(unit.text, question_terms)
                # "…!" + "[来源 1](…)" would read as markdown image syntax: keep them apart.
                glue = " " if text.endswith("!") else ""
                kind, body, size = "text", text + glue + marker, len(text)
            cost = count_tokens(body)
            if blocks and (chars + size > self.max_chars or tokens + cost > max_tokens):
                continue
            blocks.append((kind, body))
            shown.append(item)
            chars += size
            tokens += cost
        if not blocks and shown:
            # Only a caption answered: its title (OCR text runs after the first space), cited,
            # before the image itself.
            unit = shown[0].unit
            text = unit.text.split()[0][:TUNING.caption_chars]
            blocks.append(("text", f"{text}[来源 {unit.source}](citation://{unit.source})"))
        return blocks + _images(shown, parts, question, question_terms)


_FIGURE = re.compile(r"\d+(?:[.:：]\d+)?")


_MAX_MONEY_COLUMNS = 3  # more prices than that in one row is a price list: the row shows whole
_OCR_DUMP = re.compile(r"^\s*(?:\[图片\]|图片[：:])")
_COMPARISON = re.compile(r"对比|比较|区别|差别|差异|不同|表格|列表|一览|分别|各自|各是|各为|vs\.?", re.I)
_LABEL = re.compile(r"^[-•*·\s]*([\u4e00-\u9fff]{1,8})[：:]\s*(\S.*)$")  # Chinese words only: "河口（英语：" is no label


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _columns(line: str, keep: list[int]) -> str:
    cells = _cells(line)
    return "| " + " | ".join(cells[i] for i in keep if i < len(cells)) + " |"


def _column_matches(header: str, question_terms: set[str]) -> dict[int, int]:
    """For each column after the first whose name holds a question word, how many question
    terms (words and bigrams) its name holds."""
    matches = {}
    words = [t[2:] for t in question_terms if t.startswith("w:") and len(t) > 3 and _CJK_RUN.fullmatch(t[2:])]
    for index, name in enumerate(_cells(header)):
        held = unit_features(name) & question_terms
        if index and any(t.startswith("w:") for t in held):
            matches[index] = len(held)
        elif index and any(_names_kind(name, word) for word in words):
            matches[index] = 1
    return matches


def _names_kind(column: str, word: str) -> bool:
    """The column is a kind of what the word names, in other words: "建议零售价" and "采购价" are
    prices (价格); a synonym of two characters or more anywhere in the name, a one-character one
    only as the name's last, which heads a Chinese compound (零售价 is a 价, 评价表 is no 价)."""
    for other in synonyms(word):
        if len(other) >= 2 and other in column or len(other) == 1 and column.rstrip("（(）) 0123456789台起").endswith(other):
            return True
    return False


def _asked_columns(header: str, question_terms: set[str]) -> list[int]:
    """The column whose name holds the most question words ("最大无线速率" for "最大无线速率是
    多少", not "最大接入终端"): what the question asks of the row's item. Empty when no column is
    named, or when several are named alike (the whole row answers then)."""
    matches = _column_matches(header, question_terms)
    best = max(matches.values(), default=0)
    asked = [index for index, count in matches.items() if count == best]
    return asked if len(asked) == 1 else []


def _gap(value: str) -> str:
    """A space between Chinese text and a value that starts with a digit or letter ("是 3年")."""
    return " " if value[:1].isascii() and value[:1].isalnum() else ""


def _range_weight(stated: tuple[Quantity, ...], text: str) -> float:
    """"我入职三年了…" is answered by the "满 1 年不满 10 年" row, not by the other rows of ranges."""
    fitted = fit(stated, text)
    if not fitted:
        return 1.0
    return TUNING.range_fit_factor if fitted > 0 else TUNING.range_miss_factor


def _compared_rows(table: Table, question: str, models: frozenset[str]) -> list[str]:
    """For a comparison of two or more named models, the table's rows about them (in table
    order); [] otherwise. Every column the question names is shown with them ("价格和保修期")."""
    if len(models) < 2 or not _COMPARISON.search(question):
        return []
    rows = [row for row in table.rows if model_codes(_cells(row)[0]) & models]
    return rows if len(rows) >= 2 else []


def _model_columns(header: str, asked: frozenset[str]) -> list[int]:
    """In a table of items as columns ("| 项目 | 星河X3 | 星河X3 Pro |"), the columns of the models
    the question names (`asked`), and only those: X3's question reads X3's column, never X3 Pro's."""
    if not asked:
        return []
    names = _cells(header)
    return [i for i, name in enumerate(names) if i and model_codes(name) and model_codes(name) <= asked]


def _money_columns(row: str) -> list[int]:
    cells = _cells(row)
    found = [i for i, cell in enumerate(cells) if i and ANSWER_SHAPES["money"].search(cell)]
    return found if 0 < len(found) <= _MAX_MONEY_COLUMNS else []


def _lead_with_comparison(
    chosen: list[Scored], scored: list[Scored], parts: list[SourceParts], question: str, models: frozenset[str]
) -> list[Scored]:
    """For a comparison of named models, a table row whose table lists more of them than the
    first chosen line names goes first: its rows answer for every model ("星河X1、X3、X3 Pro 的保修期
    分别是多久？" is the table's three rows, not a sentence that names two of them)."""
    if len(models) < 2 or not _COMPARISON.search(question):
        return chosen
    def named(item: Scored) -> int:
        if item.unit.table is None:
            return len(model_codes(item.unit.text) & models)
        rows = _compared_rows(parts[item.unit.order].tables[item.unit.table], question, models)
        return len(set().union(*(model_codes(_cells(row)[0]) for row in rows)) & models) if rows else 0
    tables = [item for item in scored if item.unit.table is not None]
    if not tables:
        return chosen
    best = max(tables, key=lambda item: (named(item), item.score, -item.unit.order, -item.unit.position))
    if named(best) <= named(chosen[0]):
        best = chosen[0]
        if best.unit.table is None or named(best) < 2:
            return chosen
    same_table = (best.unit.order, best.unit.table)
    # What the table says for each model is not repeated: a line that names a model adds either a
    # fact the table already holds or one about a model not asked.
    def names_a_model(item: Scored) -> bool:
        header = parts[item.unit.order].tables[item.unit.table].header if item.unit.table is not None else ""
        return bool(model_codes(item.unit.text) or model_codes(header))
    rest = [c for c in chosen if (c.unit.order, c.unit.table) != same_table and not names_a_model(c)]
    return [best, *rest][:TUNING.max_lines]


def _row_like(text: str) -> bool:
    """A table row that came as plain text (a PDF's table read line by line): several short
    cells apart by spaces, no sentence punctuation."""
    cells = text.split()
    return (
        len(cells) >= _ROW_CELLS
        and not _SENTENCE_PUNCTUATION.search(text)
        and all(len(cell) <= _ROW_CELL_CHARS for cell in cells)
    )


_ROW_CELLS = 3
_ROW_CELL_CHARS = 16
_SENTENCE_PUNCTUATION = re.compile(r"[，。；！？、,;!?]")


def _cells_sentence(header: str, row: str, asked: list[int]) -> str:
    """ "星河X3 Pro 的整机保修期是 3年。" from the row's first cell and the asked cells."""
    names, cells = _cells(header), _cells(row)
    if all(model_codes(names[i]) for i in asked if i < len(names)) and not model_codes(cells[0]):
        # A table of items as columns ("| 项目 | 星河X3 | 星河X3 Pro |"): each item is a column.
        said = []
        for i in asked:
            if i < len(cells) and cells[i]:
                item = names[i]
                space = " " if item[-1:].isascii() and item[-1:].isalnum() else ""
                said.append(f"{item}{space}的{cells[0]}是{_gap(cells[i])}{cells[i]}")
        return "，".join(said) + "。"
    key = cells[0]
    space = " " if key[-1:].isascii() and key[-1:].isalnum() else ""
    if len(asked) == 1 and asked[0] < len(cells):
        verb = _yes_no_verb(names[asked[0]], cells[asked[0]])
        if verb:
            # A yes/no column ("支持 Mesh": 支持 / 不支持) reads as a verb, not as a value.
            return f"{key}{space}{verb}。"
    parts = [f"{names[i]}是{_gap(cells[i])}{cells[i]}" for i in asked if i < len(cells) and cells[i]]
    return f"{key}{space}的" + "，".join(parts) + "。"


_YES_NO_COLUMN = re.compile(r"^(支持|可以|能否|是否支持|是否)\s*(.+)$")


def _yes_no_verb(column: str, value: str) -> str:
    """ "支持 Mesh" with "不支持" → "不支持 Mesh"; "" when the column is not a yes/no one."""
    match = _YES_NO_COLUMN.match(column.strip())
    if not match:
        return ""
    subject = match.group(2).strip()
    value = value.strip()
    if value in ("支持", "是", "可以", "能", "有"):
        return f"支持{_gap(subject)}{subject}" if match.group(1) != "可以" else f"可以{subject}"
    if value in ("不支持", "否", "不可以", "不能", "无"):
        return f"不支持{_gap(subject)}{subject}" if match.group(1) != "可以" else f"不可以{subject}"
    return ""


def _unlabelled(text: str, question_terms: set[str]) -> str:
    """The sentence without a short label of the source's ("其他型号：…", "注意：…") that names
    nothing the question asks about; a label that does ("婚假：10 天") stays."""
    match = _LABEL.match(text)
    if match is None:
        return text
    label, rest = match.group(1).strip(), match.group(2)
    if label in _FORMAT_LABELS:
        return rest
    if frozenset(lexical_features(label)) & question_terms:
        return text
    # A label naming something else is dropped only when the rest says what is asked by itself.
    words = {t for t in frozenset(lexical_features(rest)) & question_terms if t.startswith("w:")}
    return rest if words else text


# Labels that say how a source is laid out, never what it is about.
_FORMAT_LABELS = frozenset("标准答案 答案 答 回答 说明 备注 注 注意 提示 其他型号 其他 另外 此外".split())


def _restates(text: str, shown: list[str]) -> bool:
    """A line whose figures all stand in a line already shown, with nothing else asked to add:
    the FAQ's "RESET 孔 10 秒" and the manual's "按住 RESET 孔 10 秒" are one fact, told once."""
    figures = set(_FIGURE.findall(text))
    if not figures:
        return False
    return any(figures <= set(_FIGURE.findall(line)) for line in shown)


def _covers_question(unit: Unit, parts: list[SourceParts], question: str, minimum: float) -> bool:
    return coverage_in_context(unit, parts, content_terms(question)) >= minimum


def _answer_likelihood(unit: Unit, wants: frozenset[str]) -> float:
    """How much a unit looks like an answer of the kind the question asks for (a number for
    "多少/哪一年", a cause for "为什么"); a question sentence restates rather than answers."""
    factor = 1.0
    if unit.asks:
        factor *= TUNING.asks_factor
    if unit.lead:
        factor *= TUNING.lead_factor
    for kind in wants:
        if kind == "image":
            continue
        if ANSWER_SHAPES[kind].search(unit.text):
            factor *= TUNING.shape_bonus
        elif unit.table is None:
            # "几号？" answered by a sentence with no number at all has not answered it. Places
            # and causes are written in too many ways for their absence to say as much.
            factor *= TUNING.shape_miss.get(kind, 1.0)
    # A caption describes a picture: the answer when the question is about one, else a weak one.
    if unit.caption:
        factor *= TUNING.shape_bonus if "image" in wants else TUNING.caption_factor
    return factor


def _table_rows(item: Scored, scored: list[Scored], table: Table, question: str) -> list[str]:
    """The rows of the chosen row's table that match the question best by their own cells (at
    most five, in table order); when only the header matches, the first five rows. Where the
    question states a quantity some rows' ranges take in, those rows only."""
    unit = item.unit
    rows = [s for s in scored if s.unit.order == unit.order and s.unit.table == unit.table]
    stated = stated_quantities(question)
    fitting = [s for s in rows if fit(stated, s.unit.text) > 0]
    rows = fitting or rows
    best = max(s.own for s in rows)
    rows = [s for s in rows if s.own >= best * TUNING.row_ratio]
    rows.sort(key=lambda s: (-s.own, -s.score, s.unit.position))
    return [s.unit.text for s in sorted(rows[:TUNING.max_table_rows], key=lambda s: s.unit.position)]


def _images(
    shown: list[Scored], parts: list[SourceParts], question: str, question_terms: set[str]
) -> list[tuple[str, str]]:
    """The image lines of cited sources, for image questions and quoted image captions."""
    wants = bool(IMAGE_QUESTION.search(question))
    blocks: list[tuple[str, str]] = []
    used: set[int] = set()
    for item in shown:
        unit = item.unit
        assets = [a for a in parts[unit.order].assets if a.id not in used]
        if not assets or not (wants or unit.caption):
            continue

        def closeness(indexed: tuple[int, Asset]) -> tuple[int, int, int]:
            index, asset = indexed
            caption = unit_features(asset.caption)
            return (len(caption & question_terms), len(caption & unit.features), -index)

        _, asset = max(enumerate(assets), key=closeness)
        used.add(asset.id)
        blocks.append(("image", asset.line))
        if len(blocks) == TUNING.max_images:
            break
    return blocks


def _join(blocks: list[tuple[str, str]]) -> str:
    """Lines one per row; a table stands apart (blank lines) so markdown renders it."""
    out = []
    for index, (kind, body) in enumerate(blocks):
        if index:
            out.append("\n\n" if kind == "table" or blocks[index - 1][0] == "table" else "\n")
        out.append(body)
    return "".join(out)


_YES_NO = re.compile(r"[吗么嘛][？?]?\s*$|是否|能否|有没有|能不能|可不可以|支不支持|带不带")
# Verbs a yes/no question about a product asks with; the feature is what follows them.
_FEATURE_VERBS = frozenset("支持 有 带 能 可以 是否 能否 配 配备 功能 可".split())
_ASCII_WORD = re.compile(r"[0-9a-z.+-]+")


def unmentioned_feature(question: str, sources: Sequence[AnswerSource]) -> str:
    """For a yes/no question about a named model's feature, the feature as the question writes it
    when no source mentions it ("" otherwise): "支持 5G 手机卡吗？" of a manual that never says 5G
    is not answered by what it says of Mesh."""
    if not _YES_NO.search(question) or not model_codes(question):
        return ""
    folded = normalise(question).lower()
    spans = [span.lower() for span in model_code_spans(question)]
    spanned = {word for span in spans for word in span.split()}
    terms = [t for t in content_terms(question) if t not in spanned and t not in _FEATURE_VERBS and len(t) >= 2
             # the brand glued before the code ("星河X3"): part of the item's name
             and not any(f"{t}{span}" in folded.replace(" ", "") for span in (s.replace(" ", "") for s in spans))]
    if not terms:
        return ""
    key = max(terms, key=lambda t: (term_weight(t), -terms.index(t)))
    text = "\n".join(normalise(f"{s.title}\n{s.text}").lower() for s in sources)
    if _ASCII_WORD.fullmatch(key):
        mentioned = re.search(rf"(?<![0-9a-z.]){re.escape(key)}(?![0-9a-z])", text) is not None
    else:
        mentioned = key in text
    if mentioned:
        return ""
    # The feature as the question spells it: from its first term to its last.
    positions = [(folded.find(t), t) for t in terms if folded.find(t) >= 0]
    start = min(p for p, _ in positions)
    end = max(p + len(t) for p, t in positions)
    return normalise(question)[start:end].strip()


def _insufficient(question: str) -> str:
    # The same words as the pipeline's own decline, which adds whom to contact.
    return "根据当前知识库无法确定该问题的答案：没有找到足够可靠的依据。"


def _deltas(answer: str) -> Iterator[str]:
    """Small pieces, as a model would stream them; citation markers and image lines stay whole."""
    position = 0
    for marker in _WHOLE.finditer(answer):
        yield from _pieces(answer[position : marker.start()])
        yield marker.group(0)
        position = marker.end()
    yield from _pieces(answer[position:])


def _pieces(text: str) -> Iterator[str]:
    for start in range(0, len(text), TUNING.delta_chars):
        yield text[start : start + TUNING.delta_chars]
