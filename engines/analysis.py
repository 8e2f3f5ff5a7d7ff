"""Text analysis for the sparse (BM25) channel: the terms a chunk is indexed under and a
question searches for. Index and query go through the same function, so they always agree.

Milvus's own jieba analyzer splits codes at every hyphen ("LX-9000" → "lx", "-", "9000"), knows
no English stemming and no domain words, and is fixed per collection. Here the terms are made in
Python and Milvus only splits them at spaces (and stems English words, drops English stop words):

1. Normalise: NFKC (full-width letters and digits, "℃" → "°C"), lowercase, traditional Chinese
   characters to simplified (OpenCC's character table), so "報銷" finds "报销".
2. Domain terms of the knowledge base's dictionary, wherever they occur, as one term each. They
   are *added* to the normal segmentation, never replace it: a dictionary edited after indexing
   changes nothing that matched before, and matches more once the knowledge base is re-indexed.
3. Chinese runs: jieba words (precise mode, HMM for unknown words). Adding the parts jieba's
   search mode finds ("年休假" → "休假") lowered nDCG@10 on both shared sets, so it is not done.
4. Latin and digit runs: words and codes whole ("lx-9000", "x3", "3.5"), a code's parts and its
   joined form ("lx", "9000", "lx9000"), so "LX9000", "lx 9000" and "LX-9000" meet; a number
   with the unit right after it as one more term ("3.5吨", "2°c", "15%").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

from engines.lexical import CJK_CHARS, IMPLIED_MEASURES, fold, segmenter

ANALYSIS_VERSION = "terms-v1"
# Knowledge bases created before the terms analysis: Milvus segments their text itself (jieba),
# so no dictionary of ours reaches them.
LEGACY_ANALYSIS = "jieba"

# Milvus side: split at spaces; English stemming and stop words apply to Latin words only.
MILVUS_ANALYZER_PARAMS = {
    "tokenizer": "whitespace",
    "filter": [
        "lowercase",
        {"type": "stemmer", "language": "english"},
        {"type": "stop", "stop_words": ["_english_"]},
    ],
}

_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
# A code or word: letters and digits, joined inside by - _ . / (not at its ends).
_LATIN = re.compile(r"[a-z0-9\u00c0-\u024f]+(?:[-_./][a-z0-9\u00c0-\u024f]+)*")
_JOINERS = re.compile(r"[-_./]")
_NUMBER = re.compile(r"^\d+(?:[.,]\d+)?$")
# What may follow a number as its unit: one CJK character (not a particle: "3的" is no unit),
# °c / °f, %, ‰.
_NOT_UNITS = "的了是和与及或在为对把被就也都"
_UNIT = re.compile(f"(?:°[cf]|[%‰]|(?![{_NOT_UNITS}])[{CJK_CHARS}])")
_MAX_TERM_CHARS = 64  # longer "words" are base64, hashes or URLs: noise for BM25


def normalise(text: str) -> str:
    return fold(text)


class Dictionary:
    """A knowledge base's domain terms (names, products, jargon jieba splits apart)."""

    def __init__(self, terms: Iterable[str] = ()) -> None:
        cleaned = {normalise(t).strip() for t in terms}
        self.terms = tuple(sorted((t for t in cleaned if t and len(t) <= _MAX_TERM_CHARS), key=lambda t: (-len(t), t)))
        self._pattern = (
            re.compile("|".join(re.escape(t) for t in self.terms)) if self.terms else None
        )

    def find(self, normalised: str) -> list[str]:
        if self._pattern is None:
            return []
        return [_compact(m.group()) for m in self._pattern.finditer(normalised)]

    def __bool__(self) -> bool:
        return bool(self.terms)


EMPTY_DICTIONARY = Dictionary()


@lru_cache(maxsize=256)
def dictionary_of(terms: tuple[str, ...]) -> Dictionary:
    return Dictionary(terms)


def parse_terms(text: str) -> tuple[str, ...]:
    """One term per line (commas and 、 separate too); blank lines and # comments ignored."""
    terms: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        for term in re.split(r"[,，、;；]", line):
            term = term.strip()
            if term and term not in terms:
                terms.append(term)
    return tuple(terms)


def analyse(text: str, *, dictionary: Dictionary = EMPTY_DICTIONARY) -> list[str]:
    """The BM25 terms of a text, in text order (repeats kept: they are term frequency)."""
    normalised = normalise(text)
    terms = dictionary.find(normalised)
    position = 0
    for match in _CJK_RUN.finditer(normalised):
        terms.extend(_latin_terms(normalised, position, match.start()))
        terms.extend(_cjk_terms(match.group()))
        position = match.end()
    terms.extend(_latin_terms(normalised, position, len(normalised)))
    return terms


def analysed_text(text: str, *, dictionary: Dictionary = EMPTY_DICTIONARY) -> str:
    """`analyse` joined by spaces: what the Milvus text field stores."""
    return " ".join(analyse(text, dictionary=dictionary))


def analysed_query(text: str, *, dictionary: Dictionary = EMPTY_DICTIONARY) -> str:
    """What a question searches for: its terms, and the measure a "how heavy / how big" word
    asks about ("有多重" also searches "重量"), which the answering text names instead."""
    terms = analyse(text, dictionary=dictionary)
    return " ".join(terms + [IMPLIED_MEASURES[t] for t in terms if t in IMPLIED_MEASURES])


def _cjk_terms(run: str) -> list[str]:
    return segmenter().lcut(run, HMM=True)


def _latin_terms(text: str, start: int, end: int) -> list[str]:
    terms: list[str] = []
    for match in _LATIN.finditer(text, start, end):
        token = match.group()
        if len(token) > _MAX_TERM_CHARS:
            continue
        terms.append(token)
        if _JOINERS.search(token) and not _NUMBER.match(token):
            parts = [p for p in _JOINERS.split(token) if p]
            terms.extend(parts)
            terms.append("".join(parts))
        if _NUMBER.match(token):
            unit = _UNIT.match(text, match.end())
            if unit:
                terms.append(token + unit.group())
    return terms


def _compact(term: str) -> str:
    # A dictionary term is one Milvus term: its inner spaces must not split it.
    return re.sub(r"\s+", "_", term)

