"""A relevance score per result in [0, 1] that means the same on every knowledge base.

Fusion and rerank scores only order one query's candidates (min-max, RRF and BM25 are relative
or unbounded), so they cannot tell "no evidence" from "weak evidence". This can:

- lexical: the weighted share of the question's content terms the chunk (with its title and
  headings) contains (`engines.lexical.coverage`, jieba's general IDF weights);
- semantic: the dense cosine mapped through the embedder's calibration, `(cos − low) / (high −
  low)` clipped to [0, 1]. For multilingual-e5-small, low 0.82 / high 0.92: on the shared CMRC
  sets the cosine of a question with its relevant passage has p5 0.87-0.88 and median 0.91, with
  a random passage median 0.80 and p99 0.85-0.86. Embedders without a calibration (the lexical
  hashing one, remote models) have no semantic score.

Per mode: `sparse` → lexical; `dense` → semantic (lexical when the embedder has none); `hybrid`
→ the larger of the two. Reading it: below 0.3 the chunk shares neither words nor meaning with
the question (off-topic); 0.3-0.6 partial; above 0.6 the chunk is about the question.
"""

from __future__ import annotations

from engines.lexical import content_terms, coverage

OFF_TOPIC_BELOW = 0.3


def semantic_relevance(cosine: float | None, calibration: tuple[float, float] | None) -> float | None:
    if cosine is None or calibration is None:
        return None
    low, high = calibration
    return min(1.0, max(0.0, (cosine - low) / (high - low)))


def lexical_relevance(question: str, text: str) -> float:
    terms = content_terms(question)
    return coverage(terms, text).score if terms else 0.0


def relevance(*, mode: str, lexical: float, semantic: float | None) -> float:
    if mode == "sparse" or semantic is None:
        return round(lexical, 4)
    if mode == "dense":
        return round(semantic, 4)
    return round(max(lexical, semantic), 4)
