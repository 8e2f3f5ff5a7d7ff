"""What a question asks: its words and terms (as the sources' units are read), its distinctive
words, and the shape of the answer it wants (a number, a place, a cause, a price, a picture)."""

from __future__ import annotations

import math
import re
from functools import lru_cache

from engines.lexical import (
    CJK_CHARS,
    GLUE_CHARS,
    IMPLIED_MEASURES,
    QUANTITY,
    asks_for,
    is_question_word,
    segmenter,
    unglued_words,
)
from engines.providers.local import BOUNDS, cjk_bigrams, normalise

from .tuning import TUNING

_CJK_RUN = re.compile(f"[{CJK_CHARS}]+")
_WORD_CHAR = re.compile(r"\w")

# Questions about a picture: the answer then shows the cited source's image as well.
# "图" alone counts (示意图, 截图, 位置图, 图中…) except in words that are no picture.
IMAGE_QUESTION = re.compile(
    r"图片|照片|相片|截屏|二维码|外观|外形|长什么样|长啥样|样子|模样|logo|示意图"
    r"|(?<![试意企宏蓝版])图(?![书谋灵])",
    re.I,
)

# What a question asks for, and what a sentence holding that kind of answer contains.
QUESTION_SHAPES = {
    "number": re.compile(
        r"多少|几[个位名种类项条件次回场届年月日号天周岁分秒点只头家所座部本首句层间台辆]|"
        r"多[大长高远重久宽深厚快]|哪一?[年月天日]|何年|何时|什么时[候间]|年份|日期|时间|年龄|岁数|"
        r"人口|面积|价格|费用|金额|比分|排名"
    ),
    "reason": re.compile(r"为什么|为何|原因|何故|怎么会|why", re.I),
    "place": re.compile(r"哪里|哪儿|在哪|何处|何地|什么地方|位置|地点|地址|where", re.I),
    "money": re.compile(r"多少钱|价格|价钱|售价|报价|费用|收费|花费|成本|price|cost", re.I),
    "color": re.compile(r"什么颜色|哪种颜色|颜色|什么色|colou?r", re.I),
}
ANSWER_SHAPES = {
    "number": QUANTITY,
    "reason": re.compile(r"因为|由于|因此|所以|原因|导致|为了|因而|以致|因"),
    "place": re.compile(r"位于|坐落|座落|地处|地址|[省市县区镇乡村路街道巷楼层室]"),
    "money": re.compile(r"\d\s*(?:元|块|万|亿|美元|港元|欧元|日元)|[¥￥$€£]\s*\d|RMB|CNY|USD", re.I),
    "color": re.compile(r"[红橙黄绿青蓝紫白黑灰银金粉棕褐]色|[红橙黄绿蓝紫白黑灰]灯"),
}


def key_words(question: str) -> list[str]:
    """Distinctive words of the question: CJK words rare in general Chinese (jieba's dictionary
    frequency below `common_word_freq` in tuning.toml, or not in it at all, as most names) and Latin or
    digit tokens of two characters or more. Characters jieba glued to an unknown name
    ("晏是", "成苏镜宇") are trimmed off the edges."""
    frequencies = segmenter().FREQ
    keys = []
    for word in question_words(question):
        if is_question_word(word):
            continue
        core = word.strip(GLUE_CHARS) or word
        if len(core) < 2:
            continue
        if _CJK_RUN.fullmatch(core):
            if frequencies.get(core, 0) >= TUNING.common_word_freq:
                continue
        elif not core.isalnum():
            continue
        keys.append(core)
    return keys


def wanted_shapes(question: str) -> frozenset[str]:
    wants = {kind for kind, pattern in QUESTION_SHAPES.items() if pattern.search(question)}
    if IMAGE_QUESTION.search(question):
        wants.add("image")
    return frozenset(wants)

@lru_cache(maxsize=4096)
def question_words(question: str) -> tuple[str, ...]:
    """The question's words, lowercased, with the pronoun or modal jieba's HMM glues to the first
    character of a word it does not know cut off ("我入" + "职" → "我" + "入" + "职"): "我入职三年了"
    is not about a word "我入". The characters stay apart, as the sources' words do not join them
    either; their bigrams ("入职") carry the word."""
    words = (word.lower() for word in unglued_words(segmenter().lcut(normalise(question))) if _WORD_CHAR.search(word))
    return tuple(BOUNDS.get(word, word) for word in words)


def question_terms(question: str) -> set[str]:
    """Content words of the question, and CJK bigrams of the text left between question words
    (so "哪些材料" yields "材料", not the noise bigram "些材")."""
    words = list(question_words(question))
    # "几个字符", "什么地方": the kind of answer asked for goes with the question word.
    asking = {i for i in range(1, len(words)) if asks_for(words[i - 1], words[i])}
    skipped = [is_question_word(w) or i in asking for i, w in enumerate(words)]
    kept = [w for w, skip in zip(words, skipped, strict=True) if not skip]
    remainder = "".join(" " if skip else w for w, skip in zip(words, skipped, strict=True))
    # "有多重？" asks for the weight: the measure it names is a word the answer's table uses.
    implied = [IMPLIED_MEASURES[w] for w in words if w in IMPLIED_MEASURES]
    return {f"w:{w}" for w in kept + implied} | {f"b:{b}" for b in cjk_bigrams(remainder)}



def term_weights(terms: set[str], held: list[set[str]]) -> dict[str, float]:
    """Smoothed IDF over the context units (`held`: the question terms each unit holds);
    bigrams and one-character words count half (bigrams mostly repeat words, single characters
    are often segmentation leftovers).

    A term missing from the whole context keeps the highest weight, so a question whose key
    term the context never mentions ends up with low support everywhere.
    """
    total = len(held)
    weights = {}
    for term in terms:
        df = sum(1 for h in held if term in h)
        weight = math.log(1 + (total + 1) / (df + 0.5))
        weights[term] = weight if term.startswith("w:") and len(term) > 3 else weight / 2
    return weights
