"""A plain in-memory BM25 over jieba words: the baseline every mode is compared with.

Deliberately independent of Milvus and of the product's retrieval path, so that it measures
what a textbook lexical ranker gets on the same corpus and queries.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import jieba

_WORD = re.compile(r"\w", re.UNICODE)


def tokenize(text: str) -> list[str]:
    return [t.lower() for t in jieba.lcut(text) if t.strip() and _WORD.search(t)]


class BM25:
    def __init__(self, documents: Sequence[tuple[str, str]], *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.ids = [doc_id for doc_id, _ in documents]
        self.term_freqs = [Counter(tokenize(text)) for _, text in documents]
        self.lengths = [sum(tf.values()) for tf in self.term_freqs]
        self.avg_length = (sum(self.lengths) / len(self.lengths)) if self.lengths else 0.0
        document_freq: Counter[str] = Counter()
        for tf in self.term_freqs:
            document_freq.update(tf.keys())
        n = len(documents)
        self.idf = {t: math.log(1 + (n - df + 0.5) / (df + 0.5)) for t, df in document_freq.items()}
        self.postings: dict[str, list[int]] = {}
        for index, tf in enumerate(self.term_freqs):
            for term in tf:
                self.postings.setdefault(term, []).append(index)

    def search(self, query: str, *, k: int = 10) -> list[str]:
        scores: dict[int, float] = {}
        for term in set(tokenize(query)):
            idf = self.idf.get(term)
            if idf is None:
                continue
            for index in self.postings[term]:
                tf = self.term_freqs[index][term]
                norm = tf + self.k1 * (1 - self.b + self.b * self.lengths[index] / (self.avg_length or 1))
                scores[index] = scores.get(index, 0.0) + idf * tf * (self.k1 + 1) / norm
        best = sorted(scores, key=lambda i: (-scores[i], i))[:k]
        return [self.ids[i] for i in best]
