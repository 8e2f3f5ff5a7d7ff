"""The offline provider: deterministic, lexical, no network, no model weights.

It keeps the whole system usable (and testable) on a fresh machine. Every model here works on
words and characters, not meaning: retrieval quality is that of a good keyword engine. It has no
generative chat model: answers are composed from the evidence by the chat app's extractive
answerer (`chat.answering.extractive`), which uses the text features defined here.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from functools import lru_cache

import numpy as np

from engines.lexical import (
    CJK_CHARS,
    fold_characters,
    segmenter,
)
from engines.ports import ChatMessage, ProviderUnavailable, RerankScore


LOCAL_EMBEDDING_MODEL = "local-hash-lexical-v1"

# --- text features ------------------------------------------------------------------------------

_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
_WORD_CHAR = re.compile(r"\w")


def normalise(text: str) -> str:
    # Case is kept (lexical_words lowercases later); traditional characters fold to simplified
    # exactly as the index folds them.
    return fold_characters(text)


def lexical_words(text: str) -> list[str]:
    """jieba words (precise mode, HMM on for words missing from the dictionary such as
    "入职"), lowercased, without whitespace- or punctuation-only tokens."""
    return _words(normalise(text))


def cjk_bigrams(text: str) -> list[str]:
    return _bigrams(normalise(text))


def lexical_features(text: str) -> list[str]:
    """Words and CJK character bigrams, in separate namespaces (a word "入职" and the bigram
    "入职" are different evidence)."""
    return _features(normalise(text))


# A bound is written several ways: "最少要几位" is answered by "至少 12 位", "最多报销多少" by "不超过
# 500 元". Question and sentence both read each spelling as one word of its direction.
BOUNDS = {
    "最少": "至少", "不少于": "至少", "不低于": "至少", "起码": "至少",
    "最多": "至多", "不超过": "至多", "不多于": "至多", "不高于": "至多",
}


@lru_cache(maxsize=1 << 14)
def unit_features(text: str) -> frozenset[str]:
    # A context's sentences come back with question after question: segment each once.
    features = lexical_features(text)
    bounds = [f"w:{BOUNDS[f[2:]]}" for f in features if f.startswith("w:") and f[2:] in BOUNDS]
    return frozenset(features + bounds)


def _features(normalised: str) -> list[str]:
    return [f"w:{w}" for w in _words(normalised)] + [f"b:{b}" for b in _bigrams(normalised)]


def _words(normalised: str) -> list[str]:
    return [w.lower() for w in segmenter().lcut(normalised) if _WORD_CHAR.search(w)]


def _bigrams(normalised: str) -> list[str]:
    return [run[i : i + 2] for run in _CJK_RUN.findall(normalised) for i in range(len(run) - 1)]


@lru_cache(maxsize=1 << 20)
def _feature_hash(feature: str) -> int:
    # blake2b, not hash(): Python salts str hashes per process, vectors must be stable forever.
    return int.from_bytes(
        hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little"
    )


# --- embedder -----------------------------------------------------------------------------------

# Texts without any feature (empty, whitespace, punctuation only) are embedded as this single
# reserved feature: a deterministic unit vector on one hashed bucket. A zero vector would make
# cosine similarity undefined; this way all such texts are identical to each other and close to
# orthogonal to real text.
_EMPTY_FEATURE = "\x00empty"


class LocalHashingEmbedder:
    """Lexical hashing embedder (model "local-hash-lexical-v1"). It is lexical, not semantic.

    Features: jieba words (lowercased, punctuation dropped) and CJK character bigrams. Each
    feature is hashed with blake2b to a bucket and a sign (signed feature hashing), weighted by
    sub-linear term frequency 1 + log(tf), and the vector is L2-normalised. Texts that share
    words or bigrams get a high cosine; synonyms and paraphrases do not.
    """

    model = LOCAL_EMBEDDING_MODEL
    semantic = False
    similarity_range = None
    uses_all_cores = False

    def __init__(self, *, dimension: int = 512) -> None:
        if dimension < 8:
            raise ValueError("dimension must be at least 8")
        self.dimension = dimension

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        matrix = np.vstack([self._vector(text) for text in texts])
        return matrix.tolist()

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text).tolist()

    def _vector(self, text: str) -> np.ndarray:
        # NFKC only, as when this model was first indexed: folding more would move stored vectors.
        counts = Counter(_features(unicodedata.normalize("NFKC", text))) if text else Counter()
        vector = self._hashed(counts) if counts else None
        if vector is None:
            vector = self._hashed(Counter({_EMPTY_FEATURE: 1}))
            assert vector is not None
        return vector

    def _hashed(self, counts: Counter[str]) -> np.ndarray | None:
        size = len(counts)
        hashes = np.fromiter((_feature_hash(f) for f in counts), dtype=np.uint64, count=size)
        tf = np.fromiter(counts.values(), dtype=np.float64, count=size)
        buckets = (hashes % np.uint64(self.dimension)).astype(np.intp)
        signs = np.where((hashes >> np.uint64(63)) == 1, -1.0, 1.0)
        vector = np.bincount(buckets, weights=(1.0 + np.log(tf)) * signs, minlength=self.dimension)
        norm = float(np.linalg.norm(vector))
        if norm == 0.0:  # every feature cancelled out in colliding buckets
            return None
        return vector / norm


# --- reranker -----------------------------------------------------------------------------------


class LocalLexicalReranker:
    """BM25 over the candidate set (words + CJK bigrams), blended with query-term coverage.

    IDF is computed over the candidates themselves, so a term shared by every candidate says
    little. Coverage (the IDF share of query terms a document contains) dominates, so a document
    answering all parts of the question beats one repeating a single term. Scores lie in [0, 1)
    and only order this candidate set; ties keep the input (fusion) order.
    """

    name = "local-lexical"

    def __init__(self, *, k1: float = 1.2, b: float = 0.75, coverage_weight: float = 0.7) -> None:
        self.k1 = k1
        self.b = b
        self.coverage_weight = coverage_weight

    def rerank(self, query: str, documents: Sequence[str], *, top_n: int) -> list[RerankScore]:
        if top_n <= 0 or not documents:
            return []
        # Sorted: float sums must not depend on the per-process order of a set.
        query_terms = sorted(set(lexical_features(query)))
        doc_terms = [Counter(lexical_features(d)) for d in documents]
        count = len(documents)
        if not query_terms:
            return [RerankScore(index=i, score=0.0) for i in range(min(top_n, count))]
        idf = {}
        for term in query_terms:
            df = sum(1 for terms in doc_terms if term in terms)
            idf[term] = math.log(1.0 + (count - df + 0.5) / (df + 0.5))
        total_idf = sum(idf.values())
        lengths = [sum(terms.values()) for terms in doc_terms]
        average = (sum(lengths) / count) or 1.0
        scores = []
        for index, terms in enumerate(doc_terms):
            bm25 = 0.0
            covered = 0.0
            norm = self.k1 * (1 - self.b + self.b * lengths[index] / average)
            for term in query_terms:
                tf = terms.get(term, 0)
                if tf:
                    covered += idf[term]
                    bm25 += idf[term] * tf * (self.k1 + 1) / (tf + norm)
            score = self.coverage_weight * covered / total_idf + (1 - self.coverage_weight) * (
                bm25 / (bm25 + total_idf)
            )
            scores.append(RerankScore(index=index, score=score))
        scores.sort(key=lambda s: (-s.score, s.index))
        return scores[:top_n]


# --- rewriter -----------------------------------------------------------------------------------


class IdentityRewriter:
    """No rewriting: the local provider has no model that could rephrase safely."""

    name = "none"

    def rewrite(self, question: str) -> str | None:
        return None


# --- chat model ---------------------------------------------------------------------------------


class OfflineChatModel:
    """The local provider's chat model: there is none that writes. It names the offline answerer
    on traces and tells callers that need a generative model (HyDE, model rewrites, item
    extraction) that there is none; answers come from `chat.answering.extractive`."""

    name = "local-extractive"
    generative = False

    def stream(self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024,
               temperature: float = 0.2) -> Iterator[str]:
        raise ProviderUnavailable("the local provider has no generative chat model")

    def complete(self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024,
                 temperature: float = 0.2) -> str:
        raise ProviderUnavailable("the local provider has no generative chat model")


# --- captioner ----------------------------------------------------------------------------------


class LocalCaptioner:
    """Caption = "图片：" + the image's OCR text + nearby document text. Never calls a network."""

    name = "local-ocr"

    def __init__(self, *, max_ocr_chars: int = 500, max_context_chars: int = 200) -> None:
        self.max_ocr_chars = max_ocr_chars
        self.max_context_chars = max_context_chars

    def caption(self, *, image_jpeg: bytes, context: str, ocr_text: str = "") -> str:
        ocr = _clip(" ".join(ocr_text.split()), self.max_ocr_chars)
        nearby = _clip(" ".join(context.split()), self.max_context_chars)
        if ocr and nearby:
            return f"图片：{ocr}（上下文：{nearby}）"
        if ocr:
            return f"图片：{ocr}"
        if nearby:
            return f"图片：（未识别到文字）上下文：{nearby}"
        return "图片：（未识别到文字）"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + "…"
