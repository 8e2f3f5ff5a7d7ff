"""The offline provider: deterministic, lexical, no network, no model weights.

It keeps the whole system usable (and testable) on a fresh machine. Every model here works on
words and characters, not meaning: retrieval quality is that of a good keyword engine, and the
chat model can only quote the context it is given.
"""

from __future__ import annotations

import hashlib
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engines.ports import ChatMessage, ProviderUnavailable, RerankScore
from engines.tokens import count_tokens

LOCAL_EMBEDDING_MODEL = "local-hash-lexical-v1"

# --- text features ------------------------------------------------------------------------------

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_WORD_CHAR = re.compile(r"\w")


@lru_cache(maxsize=1)
def _segmenter():
    import jieba

    # Loading the dictionary takes about a second: do it once, up front, rather than inside the
    # first request that happens to segment text (jieba.initialize is locked and idempotent).
    jieba.initialize()
    return jieba.dt


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def lexical_words(text: str) -> list[str]:
    """jieba words (precise mode, HMM on for words missing from the dictionary such as
    "入职"), lowercased, without whitespace- or punctuation-only tokens."""
    return _words(_normalise(text))


def cjk_bigrams(text: str) -> list[str]:
    return _bigrams(_normalise(text))


def lexical_features(text: str) -> list[str]:
    """Words and CJK character bigrams, in separate namespaces (a word "入职" and the bigram
    "入职" are different evidence)."""
    normalised = _normalise(text)
    return [f"w:{w}" for w in _words(normalised)] + [f"b:{b}" for b in _bigrams(normalised)]


def _words(normalised: str) -> list[str]:
    return [w.lower() for w in _segmenter().lcut(normalised) if _WORD_CHAR.search(w)]


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
        counts = Counter(lexical_features(text)) if text else Counter()
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
        query_terms = set(lexical_features(query))
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


# --- extractive chat model ----------------------------------------------------------------------

_CONTEXT_BLOCK = re.compile(r"<knowledge_context>(.*?)</knowledge_context>", re.S)
_SOURCE_MARKER = re.compile(r"^[ \t]*\[来源\s*(\d+)\][ \t]*(.*)$", re.M)
_QUESTION = re.compile(r"问题[：:][ \t]*(.+?)(?:\n[ \t]*\n|\Z)", re.S)
_SENTENCE_SPLIT = re.compile(r"(?<=[。！？!?；;])|(?<=\.)\s+")
_CITATION = re.compile(r"\[来源 \d+\]\(citation://\d+\)")

# Question words that say what kind of answer is wanted, not what it is about.
_QUESTION_STOPWORDS = frozenset(
    "什么 哪些 哪个 哪里 哪儿 哪 怎么 怎么办 怎么样 怎样 如何 是否 是不是 有没有 能不能 可不可以 "
    "吗 呢 吧 啊 呀 么 啥 咋 请问 多少 为什么 为何 几 什么时候 何时 多久 "
    "的 了 是 有 在 和 与 及 或 我 我们 你 你们 要 需要 能 能否 可以 会 应该 一下 一个".split()
)

_MAX_SENTENCES = 5
_DELTA_CHARS = 4


@dataclass(frozen=True)
class ContextSource:
    number: int
    title: str
    text: str


@dataclass(frozen=True)
class _Sentence:
    source: int
    order: int  # position of the source in the context, then of the sentence in it
    position: int
    text: str
    features: frozenset[str]


def parse_knowledge_prompt(
    messages: Sequence[ChatMessage],
) -> tuple[list[ContextSource], str] | None:
    """Sources and question from the last user message that holds a knowledge context.

    The format (the context builder produces exactly this)::

        <knowledge_context>
        [来源 1] 可选标题
        正文第一段……
        正文第二段……

        [来源 2]
        正文……
        </knowledge_context>

        问题：用户的问题

    Each source starts on its own line with `[来源 N]`. Text after the marker on the same line is
    the title when more text follows on the next lines, and the source text otherwise. Sources are
    separated by blank lines. The question is the text after `问题：` (or `问题:`) up to the
    next blank line; without it, whatever follows the context block is the question.
    Returns None when no user message has a `<knowledge_context>` block.
    """
    for message in reversed(messages):
        if message.role != "user":
            continue
        block = _CONTEXT_BLOCK.search(message.content)
        if block is None:
            continue
        after = message.content[block.end() :]
        before = message.content[: block.start()]
        match = _QUESTION.search(after) or _QUESTION.search(before)
        question = match.group(1).strip() if match else after.strip()
        return _parse_sources(block.group(1)), question
    return None


def _parse_sources(block: str) -> list[ContextSource]:
    markers = list(_SOURCE_MARKER.finditer(block))
    sources = []
    for i, marker in enumerate(markers):
        end = markers[i + 1].start() if i + 1 < len(markers) else len(block)
        body = block[marker.end() : end].strip()
        rest_of_line = marker.group(2).strip()
        if body:
            sources.append(ContextSource(int(marker.group(1)), rest_of_line, body))
        elif rest_of_line:
            sources.append(ContextSource(int(marker.group(1)), "", rest_of_line))
    return sources


def _split_sentences(text: str) -> list[str]:
    sentences = []
    for line in text.splitlines():
        for piece in _SENTENCE_SPLIT.split(line):
            piece = piece.strip()
            if len(piece) >= 2 and _WORD_CHAR.search(piece):
                sentences.append(piece)
    return sentences


class ExtractiveChatModel:
    """Answers by quoting the context sentences that best support the question.

    The prompt format is documented on `parse_knowledge_prompt`. A sentence's support is the
    IDF-weighted share of the question's content words and bigrams it contains (IDF over all
    context sentences; terms found only elsewhere in the same source count half), and it must
    contain at least one question word itself. At most five sentences with support of at least
    `min_support` and at least half the best are kept, shown one per line in context order, each
    followed by `[来源 N](citation://N)`. With no supported sentence the answer says the
    knowledge base cannot settle the question. It writes nothing of its own beyond that, so a
    prompt without a knowledge context (such as HyDE) is refused with ProviderUnavailable.
    """

    name = "local-extractive"

    def __init__(self, *, min_support: float = 0.25) -> None:
        self.min_support = min_support

    def stream(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> Iterator[str]:
        # Parse eagerly so a HyDE-style prompt fails at the call, not at the first next().
        parsed = parse_knowledge_prompt(messages)
        if parsed is None:
            raise ProviderUnavailable("local provider cannot write hypothetical answers")
        sources, question = parsed
        return _deltas(self._answer(sources, question, max_tokens=max_tokens))

    def complete(
        self, messages: Sequence[ChatMessage], *, max_tokens: int = 1024, temperature: float = 0.2
    ) -> str:
        return "".join(self.stream(messages, max_tokens=max_tokens, temperature=temperature))

    def _answer(self, sources: list[ContextSource], question: str, *, max_tokens: int) -> str:
        chosen = self._choose(sources, question)
        if not chosen:
            shown = question if len(question) <= 60 else question[:60] + "…"
            return (
                f"根据当前知识库无法确定该问题的答案：现有资料中没有找到与“{shown}”直接相关的内容。"
            )
        lines: list[str] = []
        used = 0
        for sentence in chosen:
            line = f"{sentence.text}[来源 {sentence.source}](citation://{sentence.source})"
            cost = count_tokens(line)
            if lines and used + cost > max_tokens:
                break
            lines.append(line)
            used += cost
        return "\n".join(lines)

    def _choose(self, sources: list[ContextSource], question: str) -> list[_Sentence]:
        question_terms = _question_terms(question)
        if not question_terms:
            return []
        sentences = []
        for order, source in enumerate(sources):
            for position, text in enumerate(_split_sentences(source.text)):
                features = frozenset(lexical_features(text))
                sentences.append(_Sentence(source.number, order, position, text, features))
        if not sentences:
            return []
        weights = _term_weights(question_terms, sentences)
        question_weight = sum(weights.values())
        # Terms found elsewhere in the same source (title, other sentences) earn half credit: in
        # "[来源 1] VPN 使用说明 … 如忘记密码，请在自助门户重置。" the sentence answers a question
        # about the VPN password without repeating "VPN".
        source_terms = {
            source.number: frozenset(lexical_features(source.title)).union(
                *(s.features for s in sentences if s.source == source.number)
            )
            for source in sources
        }
        supported: list[tuple[float, _Sentence]] = []
        for sentence in sentences:
            matched = question_terms & sentence.features
            if not any(term.startswith("w:") for term in matched):
                continue
            nearby = (question_terms & source_terms[sentence.source]) - matched
            support = (
                sum(weights[term] for term in matched) + sum(weights[term] for term in nearby) / 2
            ) / question_weight
            if support >= self.min_support:
                supported.append((support, sentence))
        if not supported:
            return []
        supported.sort(key=lambda item: (-item[0], item[1].order, item[1].position))
        best = supported[0][0]
        chosen: list[_Sentence] = []
        seen: set[str] = set()
        for support, sentence in supported:
            if support < best / 2 or len(chosen) == _MAX_SENTENCES:
                break
            key = "".join(sentence.text.split())
            if key in seen:
                continue
            seen.add(key)
            chosen.append(sentence)
        chosen.sort(key=lambda s: (s.order, s.position))
        return chosen


def _question_terms(question: str) -> set[str]:
    """Content words of the question, and CJK bigrams of the text left between question words
    (so "哪些材料" yields "材料", not the noise bigram "些材")."""
    words = lexical_words(question)
    kept = [w for w in words if w not in _QUESTION_STOPWORDS]
    remainder = "".join(w if w not in _QUESTION_STOPWORDS else " " for w in words)
    return {f"w:{w}" for w in kept} | {f"b:{b}" for b in cjk_bigrams(remainder)}


def _term_weights(terms: set[str], sentences: list[_Sentence]) -> dict[str, float]:
    """Smoothed IDF over the context sentences; bigrams and one-character words count half
    (bigrams mostly repeat words, single characters are often segmentation leftovers).

    A term missing from the whole context keeps the highest weight, so a question whose key
    term the context never mentions ends up with low support everywhere.
    """
    total = len(sentences)
    weights = {}
    for term in terms:
        df = sum(1 for s in sentences if term in s.features)
        weight = math.log(1 + (total + 1) / (df + 0.5))
        weights[term] = weight if term.startswith("w:") and len(term) > 3 else weight / 2
    return weights


def _deltas(answer: str) -> Iterator[str]:
    """Small pieces, as a model would stream them; citation markers stay whole."""
    position = 0
    for marker in _CITATION.finditer(answer):
        yield from _pieces(answer[position : marker.start()])
        yield marker.group(0)
        position = marker.end()
    yield from _pieces(answer[position:])


def _pieces(text: str) -> Iterator[str]:
    for start in range(0, len(text), _DELTA_CHARS):
        yield text[start : start + _DELTA_CHARS]


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
