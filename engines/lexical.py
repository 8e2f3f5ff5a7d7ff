"""Provider-independent lexical measures: how much of a question a text covers.

Scores from the retrieval channels cannot be compared across providers (RRF is rank-based,
cosine depends on the embedding model, BM25 is unbounded), so decisions that need an absolute
threshold — "is this evidence about the question at all?", "is this FAQ the same question?" —
use these measures instead. Term weights are jieba's general-purpose Chinese IDF table (bundled
with jieba, about 270k words), so they mean the same on any corpus; words missing from it are
mostly names, codes and domain terms, and get a high weight.

Matching is by substring on normalised text, not by token identity, so a question segmented
differently from the document ("入职" vs "入职流程") still matches.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

_WORD_CHAR = re.compile(r"\w")
CJK_CHARS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK = re.compile(f"[{CJK_CHARS}]")
_CJK_WORD = re.compile(f"[{CJK_CHARS}]+")
_PUNCT_OR_SPACE = re.compile(r"[\s\W_]+", re.UNICODE)

# Words that say what kind of answer is wanted or glue the sentence, not what it is about.
QUESTION_WORDS = frozenset(
    "什么 哪些 哪个 哪里 哪儿 哪 怎么 怎么办 怎么样 怎样 如何 是否 是不是 有没有 能不能 可不可以 "
    "吗 呢 吧 啊 呀 么 嘛 啥 咋 请问 多少 为什么 为何 几 几个 什么样 什么时候 何时 多久 多长 多大 多高 "
    "谁 何 何地 何人 何处 "
    "的 了 是 有 在 和 与 及 或 "
    "我 我们 你 你们 您 他 她 它 他们 这 那 这个 那个 这些 那些 要 需要 能 能否 可以 会 应该 "
    "一下 一个 告诉 知道 想 想要 请 帮 帮我 一些 有些 哪位 多 少 吗？ 呢？".split()
)
# Grammar, not subject: content_terms drops them too (the extractive model keeps them as weak
# evidence, weighted by IDF over its context).
FUNCTION_WORDS = frozenset(
    "着 过 或者 还是 就 都 也 又 还 对 把 被 给 从 向 到 为 以 于 之 其 得 地 "
    "每个 各个 一般 通常 大概 大约 一共 总共".split()
)
_NOT_HOW_MANY = frozenset("几乎 几何 几率 几经 几内".split())  # otherwise 几 + … is "how many …"
_HOW_MUCH = frozenset("大长高远重久宽深厚快")

# Pronouns and modals jieba's HMM glues to the next character ("我入职" → 我入 / 职).
_GLUED_LEADS = frozenset("我你您他她它咱能会要想得")
# Adverbs, modals and position words that stand alone in a question ("单/最/晚", "假/能", "内/休",
# "后/钱"): jieba's HMM glues them to a neighbour it does not know, and a run of single characters
# must not take them in. A word of two characters, not in the dictionary, with one of them at an
# end is two words; a run of single characters ends at one.
_GLUE_EDGES = frozenset("最要能会后前内再才已先")
# Of those, the ones a name seldom holds in its middle: a word of three characters, not in the
# dictionary, with one of them in the middle is three words.
_GLUED_INSIDE = frozenset("最要内")

# Characters jieba glues to a name it does not know ("马赛罗是", "歌叫", "成苏镜宇").
GLUE_CHARS = "是的了以有在被把和与及将对于为又也都就叫做"

# A sentence ends at 。！？； and keeps the closing quotes or brackets right after the mark
# ("…舞步呢！”" is one sentence, not "…呢！" plus "”…"); ASCII ! ? ; . end one only before
# whitespace (so "![图](…)" or "v1.2" are not cut).
_ENUMERATOR = re.compile(r"(?:\d{1,3}|[A-Za-z])[.)]")
_SENTENCE_END = re.compile(r"[。！？；]+[”’」』）)》\]\"']*|[!?;.]+[”’\"')\]]*(?=\s)")

# Unknown words: mostly names, codes and domain terms, which are the most specific evidence.
_UNKNOWN_WEIGHT_FACTOR = 1.1
_SINGLE_CHAR_FACTOR = 0.5


def visible_text(text: str) -> str:
    """What a reader sees of a text someone typed (a question, a file name): trimmed, with control
    and format characters removed (a BOM, zero-width spaces: a text of only those is empty).
    Otherwise kept as typed: rule patterns match full- and half-width punctuation themselves."""
    cleaned = "".join(ch for ch in (text or "") if ch in "\n\t" or unicodedata.category(ch)[0] != "C")
    return cleaned.strip()


@lru_cache(maxsize=1)
def segmenter():
    """jieba's tokenizer, its dictionary loaded once (about a second: do it at warm-up, not
    inside the first request that segments text)."""
    import jieba

    jieba.initialize()
    return jieba.dt


@lru_cache(maxsize=1)
def _idf_table() -> tuple[dict[str, float], float]:
    from jieba.analyse.tfidf import TFIDF

    table = TFIDF()
    return table.idf_freq, table.median_idf


def warm_up() -> None:
    segmenter()
    _idf_table()
    _traditional_to_simplified()


@lru_cache(maxsize=1)
def _traditional_to_simplified() -> dict[int, str]:
    """OpenCC's TSCharacters table as a `str.translate` map (first candidate per character)."""
    from importlib.resources import files

    table: dict[int, str] = {}
    text = files("opencc").joinpath("dictionary", "TSCharacters.txt").read_text(encoding="utf-8")
    for line in text.splitlines():
        source, _, targets = line.partition("\t")
        if len(source) == 1 and targets:
            target = targets.split(" ")[0]
            if target and target != source:
                table[ord(source)] = target
    return table


def simplified(text: str) -> str:
    """Traditional Chinese characters replaced by their simplified forms, nothing else."""
    return text.translate(_traditional_to_simplified())


def fold_characters(text: str) -> str:
    """NFKC and traditional characters to simplified, case kept: what a model reads (an
    embedder tells "VPN" from "vpn" no worse than the index folds them)."""
    return simplified(unicodedata.normalize("NFKC", text or ""))


def fold(text: str) -> str:
    """NFKC, lowercase, traditional Chinese characters to simplified: the one folding that the
    index, the question and every comparison between them share ("婚假有幾天" meets "婚假")."""
    return unicodedata.normalize("NFKC", text or "").lower().translate(_traditional_to_simplified())


def normalise(text: str) -> str:
    """Folded, no whitespace or punctuation: "年假有多少天？" == "年假 有多少天"."""
    return _normalised(text or "")


@lru_cache(maxsize=8192)
def _normalised(text: str) -> str:
    # The same chunks are read for question after question: fold each once.
    return _PUNCT_OR_SPACE.sub("", fold(text))


@lru_cache(maxsize=1 << 16)
def _normalised_term(term: str) -> str:
    # Question terms repeat across every candidate of a question and across questions.
    return normalise(term)


def content_terms(text: str) -> list[str]:
    """The words of `text` that carry its subject, in order, once each (question words,
    particles and pronouns removed)."""
    return list(_content_terms(text or ""))


def unglued_words(words: Sequence[str]) -> list[str]:
    """jieba's words, stripped, with the pronoun or modal its HMM glues to the next character of
    a word it then splits ("我入" + "职", "能休", "得设") cut off again: the glued character is
    not part of the subject."""
    idf, _median = _idf_table()
    tokens: list[str] = []
    for word in words:
        word = word.strip()
        if len(word) == 2 and word not in idf and _CJK_WORD.fullmatch(word) and (
            word[0] in _GLUED_LEADS or word[0] in _GLUE_EDGES or word[1] in _GLUE_EDGES
        ):
            tokens.extend((word[0], word[1]))
        elif len(word) >= 3 and word[-1] in _GLUE_EDGES and word not in idf and word[:-1] in idf and _CJK_WORD.fullmatch(word):
            # "最多能" is 最多 / 能.
            tokens.extend((word[:-1], word[-1]))
        elif len(word) == 3 and word[1] in _GLUED_INSIDE and word not in idf and _CJK_WORD.fullmatch(word):
            # "天内交" is 天 / 内 / 交 ("多少天内交"), not a name.
            tokens.extend(word)
        else:
            tokens.append(word)
    return tokens


@lru_cache(maxsize=8192)
def _content_terms(text: str) -> tuple[str, ...]:
    # FAQ phrasings and questions are segmented again on every search: remember them.
    folded = fold(text)
    words: list[str] = []
    run = ""  # consecutive single CJK characters: jieba's split of a word it does not know
    idf, _median = _idf_table()
    tokens = unglued_words(segmenter().lcut(folded))
    previous = ""
    for word in tokens + [""]:
        asked = asks_for(previous, word)
        previous = word or previous
        if asked:
            # "几个字符" / "什么地方": the kind of answer wanted, not what the question is about.
            continue
        if (len(word) == 1 and _CJK.fullmatch(word) and word not in QUESTION_WORDS and word not in FUNCTION_WORDS
                and word not in _GLUE_EDGES):
            run += word
            continue
        if run:
            words.append(_unglued(run))
            run = ""
        if word and _WORD_CHAR.search(word) and not is_question_word(word) and word not in FUNCTION_WORDS:
            words.append(_unglued(word))
    return tuple(dict.fromkeys(words))


# A question asking for a quantity (how many / how much / how long …), after `fold`.
_ASKS_QUANTITY = re.compile(
    r"多少|几[个位名种项条次天周年月日号点台页人岁倍级]?|多[久长大高远重宽]|百分之|比例|how (?:many|much|long)"
)


def asks_quantity(question: str) -> bool:
    return bool(_ASKS_QUANTITY.search(fold(question)))


# What states a quantity: a digit that is not part of a model name ("X3"), or a Chinese numeral
# with its unit.
QUANTITY = re.compile(
    r"(?<![A-Za-z\d])\d"
    r"|[一二两三四五六七八九十百千万亿半]+\s*[个位名种类项条件次回场届年月日号天周岁分秒点只家所座部本层间台辆人倍级页元%％]"
)


def states_quantity(text: str) -> bool:
    """Whether `text` holds the kind of thing a "多少 / 几 / 多久" question asks for."""
    return bool(QUANTITY.search(unicodedata.normalize("NFKC", text)))


_AMOUNT = r"(?:\d[\d,.]*|[一二两三四五六七八九十百千万半]+)\s*"
# A question that names what it measures ("有多重", "多久") is answered by an amount in a unit of
# that measure: "780g" answers "多重", a warranty's "3 年" does not.
_MEASURES = (
    (re.compile(r"多重|多沉|重量|多少(?:克|公斤|千克|斤)"),
     re.compile(_AMOUNT + r"(?:kg|g|mg|t|lb|克|千克|公斤|斤|吨|磅)(?![a-z])", re.I)),
    (re.compile(r"多久|多长时间|多长的时间|多少时间|多少年|多少天|多少个?月|多少小时|多少分钟"),
     re.compile(_AMOUNT + r"(?:个)?(?:工作日|自然日|年|月|周|星期|天|日|小时|钟头|分钟|分|秒|h|min|s)(?![a-z])", re.I)),
)


def states_measure(question: str, text: str) -> bool:
    """Whether `text` holds an amount of the measure `question` names (True when it names none)."""
    question, text = fold(question), unicodedata.normalize("NFKC", text)
    return all(unit.search(text) for asked, unit in _MEASURES if asked.search(question))


# A model name: a few letters then digits, with the suffix that makes it another model
# ("X3 Pro" is not "X3"). Matched on NFKC text, case-insensitively.
_MODEL_CODE = re.compile(
    r"(?<![a-z0-9])([a-z]{1,6}-?\d{1,4}[a-z]?)(?:\s*(pro|max|plus|mini|lite|ultra|mesh|se|s))?(?![a-z0-9])",
    re.I,
)


def model_code_matches(text: str) -> list[re.Match]:
    """The model names in `text` (NFKC) with where they are: for callers that cut around them."""
    return list(_MODEL_CODE.finditer(text))


def model_code_spans(text: str) -> list[str]:
    """The model names in `text` as written (NFKC), in order: "星河X3 Pro 和 X5" → ["X3 Pro", "X5"]."""
    return [m.group(0) for m in _MODEL_CODE.finditer(unicodedata.normalize("NFKC", text))]


@lru_cache(maxsize=1 << 14)
def model_codes(text: str) -> frozenset[str]:
    """The model names in `text`, folded and without spaces or hyphens ("星河X3 Pro" → "x3pro")."""
    return frozenset(
        m.group(1).lower().replace("-", "") + (m.group(2) or "").lower()
        for m in _MODEL_CODE.finditer(fold(text))
    )


_CODE_OR_NUMBER = re.compile(r"[a-z0-9][a-z0-9.\-]*", re.I)


def codes_and_numbers(text: str) -> frozenset[str]:
    """Every Latin word, code and number in `text`: what two questions must share to be the same
    question ("星河X3 Pro" and "星河X3", "满 3 年" and "满 10 年" are not)."""
    return frozenset(m.group(0).lower() for m in _CODE_OR_NUMBER.finditer(unicodedata.normalize("NFKC", text)))


def asks_for(previous: str, word: str) -> bool:
    """A measure word after "几 / 多少" ("几个字符"), or a noun after "什么 / 哪个" that only says
    the kind of answer ("什么地方", "哪个时候")."""
    if previous in _HOW_MANY_WORDS:  # "几天" holds its measure already: "几天年假" asks about 年假
        return word in MEASURE_WORDS
    if previous in ("什么", "哪个", "哪些", "哪种", "啥"):
        return word in _KIND_WORDS
    return False


# "有多重？" asks for the weight: the measure it names is the word the answer's table or sentence
# uses ("重量 780g").
IMPLIED_MEASURES = {
    "多重": "重量", "多大": "大小", "多长": "长度", "多高": "高度", "多宽": "宽度", "多远": "距离",
    "多厚": "厚度", "多深": "深度", "多快": "速度", "多贵": "价格",
}
_HOW_MANY_WORDS = frozenset("多少 多少个 几 几个".split())
# Units a "how many" question names: they say what is counted, and the answer may use another
# ("几个字符" → "12 位").
MEASURE_WORDS = frozenset(
    "字符 字 位 个 次 天 日 周 年 月 小时 分钟 秒 人 名 页 台 张 份 件 项 种 条 元 块 钱 岁 层 间 家 所 部 本".split()
)
_KIND_WORDS = frozenset("地方 时候 时间 位置 东西 样子 人 原因 办法 方法 方式 情况 内容 意思".split())


def is_question_word(word: str) -> bool:
    """Stop words, and the interrogatives jieba keeps as one word (哪一年, 哪些地方, 是谁, 几个月,
    多大, 多少钱, 什么时候, 啥意思): the expected kind of answer, not the subject."""
    return (
        word in QUESTION_WORDS
        or word.startswith(("哪", "什么", "啥", "多少", "多长", "多久", "怎么", "为什么", "第几"))
        or "谁" in word
        or (word.startswith("几") and word[:2] not in _NOT_HOW_MANY)
        or (len(word) == 2 and word[0] == "多" and word[1] in _HOW_MUCH)
        or (len(word) == 3 and word[0] in "是叫" and is_question_word(word[1:]))
    )


def _unglued(word: str) -> str:
    """jieba glues a particle or copula to a name it does not know ("马赛罗是" → "马赛罗", "歌叫"):
    a word missing from the dictionary loses such a last character."""
    idf, _median = _idf_table()
    if len(word) >= 2 and word[-1] in GLUE_CHARS and word not in idf and _CJK.fullmatch(word[-1]):
        return word[:-1]
    return word


def term_weight(term: str) -> float:
    idf, median = _idf_table()
    weight = idf.get(term)
    if weight is None:
        weight = median * _UNKNOWN_WEIGHT_FACTOR
    if len(term) == 1:
        weight *= _SINGLE_CHAR_FACTOR
    return weight


@dataclass(frozen=True)
class Coverage:
    score: float  # weighted share of the question's terms found in the text, in [0, 1]
    matched: tuple[str, ...]
    missing: tuple[str, ...]
    key_term: str  # the question's most specific term
    key_term_found: bool

    def as_dict(self) -> dict:
        return {
            "score": round(self.score, 4),
            "matched": list(self.matched),
            "missing": list(self.missing),
            "key_term": self.key_term,
            "key_term_found": self.key_term_found,
        }


def uniform_weight(term: str) -> float:
    return _SINGLE_CHAR_FACTOR if len(term) == 1 else 1.0


def coverage(
    question_terms: list[str], text: str, *, normalised_text: str | None = None, weight=term_weight
) -> Coverage:
    """How much of the question (`content_terms` of it) the text contains."""
    haystack = normalised_text if normalised_text is not None else normalise(text)
    if not question_terms:
        return Coverage(0.0, (), (), "", False)
    weights = {term: weight(term) for term in question_terms}
    total = sum(weights.values())
    matched = tuple(t for t in question_terms if _normalised_term(t) and _normalised_term(t) in haystack)
    missing = tuple(t for t in question_terms if t not in matched)
    # Single characters are mostly segmentation debris ("司马繇" → 司马 / 繇): not the key.
    key = max(question_terms, key=lambda t: (len(t) > 1, weights[t], -question_terms.index(t)))
    found = sum(weights[t] for t in matched) + sum(weights[t] * mention_share(normalise(t), haystack) for t in missing)
    score = found / total if total else 0.0
    return Coverage(min(1.0, score), matched, missing, key, key in matched)


def mention_share(term: str, text: str) -> float:
    """1.0 when `term` is in `text`; for a CJK word of three or more characters, which other
    texts segment differently ("最多能" / "最多几台"), the share of its character bigrams found
    when that is at least half; else 0."""
    if term and term in text:
        return 1.0
    if len(term) < 3 or not _CJK_WORD.fullmatch(term):
        return 0.0
    bigrams = [term[i:i + 2] for i in range(len(term) - 1)]
    share = sum(1 for b in bigrams if b in text) / len(bigrams)
    return share if share >= 0.5 else 0.0


# A line ending in one of these stops mid-sentence: PDF text and hard-wrapped documents break
# lines where the page ran out, not where the sentence did.
_CONTINUES = ("、", "，", "；")
# A line ends a sentence, or introduces what follows, with one of these (or a closing quote).
_ENDS = ("。", "！", "？", "：", ":", "!", "?", ";", "…", "”", "’", "」", "』", "）", ")")
# A line starting with one of these starts an item of its own: never a wrapped line's rest.
_OWN_START = re.compile(
    r"^(?:[-*•·#>|]|!\[|\d+(?:\.\d+)*[、.．)）]|[（(][一二三四五六七八九十\d]+[）)]|[一二三四五六七八九十]+[、.．]"
    r"|第[一二三四五六七八九十\d]+[章节条部分])"
)
# A number's unit on the next line ("…至11月22" / "日对…"): a cut no writer makes on purpose.
_UNIT_START = re.compile(r"^[日月年号时分秒点元个天周岁%％倍次台人]")
# A line at least this share of the text's widest line, ending in no sentence mark, ran out of
# page (PDF text keeps the page's line breaks).
_FULL_LINE = 0.85
_MIN_PAGE_WIDTH = 16


def _display_width(text: str) -> float:
    """A CJK or full-width character is one, anything else half."""
    return sum(1.0 if ord(ch) >= 0x2E80 else 0.5 for ch in text)


def unwrap_lines(lines: Sequence[str]) -> list[str]:
    """The lines with each sentence a page broke joined again: a line broken after a comma-like
    mark, a number cut from its unit, or a full-width line that ends in no sentence mark goes on
    in the next one, unless that starts an item of its own (a list item, a heading, a table row,
    an image). Two Latin words meeting at the break keep a space ("星河X3" + "Pro")."""
    return [joined for joined, _lines in unwrap_groups(lines)]


def unwrap_groups(lines: Sequence[str]) -> list[tuple[str, list[str]]]:
    """`unwrap_lines`, each joined line with the lines it was joined from (for a caller that
    keeps the text as written where it changes nothing)."""
    page = max((_display_width(line.strip()) for line in lines
                if not line.lstrip().startswith(("|", "!["))), default=0.0)
    groups: list[tuple[str, list[str]]] = []
    for line in lines:
        previous = groups[-1][0].rstrip() if groups else ""
        rest = line.strip()
        if (
            previous and rest and not _OWN_START.match(rest) and not previous.lstrip().startswith(("|", "!["))
            and (
                previous.endswith(_CONTINUES)
                or previous[-1].isdigit() and _UNIT_START.match(rest)
                or page >= _MIN_PAGE_WIDTH and _display_width(previous.strip()) >= _FULL_LINE * page
                and not previous.endswith(_ENDS)
            )
        ):
            gap = " " if previous[-1].isascii() and previous[-1].isalnum() and rest[0].isascii() and rest[0].isalnum() else ""
            groups[-1] = (previous + gap + rest, [*groups[-1][1], line])
        else:
            groups.append((line, [line]))
    return groups


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the sentences of `text`, line by line, whitespace trimmed."""
    spans: list[tuple[int, int]] = []
    offset = 0
    for line in text.splitlines(keepends=True):
        start = 0
        pieces = []
        for match in _SENTENCE_END.finditer(line):
            if _ENUMERATOR.fullmatch(line[start : match.end()].strip()):
                # "1. 打开…": the item's number starts its sentence, it is not one.
                continue
            pieces.append((start, match.end()))
            start = match.end()
        pieces.append((start, len(line)))
        for begin, end in pieces:
            piece = line[begin:end]
            left, right = len(piece) - len(piece.lstrip()), len(piece.rstrip())
            if right > left:
                spans.append((offset + begin + left, offset + begin + right))
        offset += len(line)
    return spans


def similarity(a: str, b: str) -> float:
    """Symmetric question similarity in [0, 1]: the geometric mean of the coverage each way,
    1.0 for texts equal after `normalise`.

    Every content word counts the same here (IDF would let names dominate: "星河X3 Pro 的价格" and
    "星河X3 和 X3 Pro 的区别" share three rare words and differ in the one that matters)."""
    if normalise(a) and normalise(a) == normalise(b):
        return 1.0
    forward = coverage(content_terms(a), b, weight=uniform_weight).score
    backward = coverage(content_terms(b), a, weight=uniform_weight).score
    return math.sqrt(forward * backward)
