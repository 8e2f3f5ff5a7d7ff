"""Quantities a question states and the ranges a source's lines hold: "我入职三年了" is answered by
the row "满 1 年不满 10 年", not by "满 10 年不满 20 年" nor by a line that holds no range.

A question states a quantity when it gives a number with its unit that it does not ask for
("入职三年", "报销一万元"; "几天" and "多少年" ask). A line holds a range of that unit when it
writes one the way rules and tables do: "满 A 年不满 B 年", "A–B 年", "A 年以上", "不满 A 年",
"A 年及以下". `fit` says whether the line's ranges take the stated quantity in (1), leave it out
(-1) or say nothing of its unit (0).
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

# Units a stated quantity and a range are compared in, with the words that mean the same unit.
_UNITS = {
    "年": "年", "周年": "年", "岁": "岁", "个月": "月", "月": "月", "天": "天", "日": "天",
    "小时": "小时", "元": "元", "块": "元", "块钱": "元", "人": "人", "次": "次", "台": "台",
}
_UNIT = "周年|个月|小时|块钱|[年岁月天日元块人次台]"
_DIGITS = "零〇一二两三四五六七八九十百千万"
_NUMBER = rf"(?:\d[\d,]*(?:\.\d+)?|[{_DIGITS}]+)"
_STATED = re.compile(rf"(?<![几多少\d{_DIGITS}])({_NUMBER})\s*(?:万\s*)?({_UNIT})")
_ASKED_BEFORE = re.compile(r"[几多少]$")

_RANGE_PATTERNS = (
    # 满 1 年不满 10 年 / 满1年未满10年 / 1 年以上不满 10 年
    (re.compile(rf"(?:满|超过|以上)?\s*({_NUMBER})\s*({_UNIT})\s*(?:以上|及以上)?\s*[，,]?\s*(?:不满|未满|不足|低于|少于)\s*({_NUMBER})\s*({_UNIT})"),
     "low_high"),
    # 1–10 年 / 1 至 10 年 / 1~10年 / 5,000 元（含）至 20,000 元
    (re.compile(rf"({_NUMBER})\s*(?:{_UNIT})?\s*(?:\(含\))?\s*(?:-|–|—|~|～|至|到)\s*({_NUMBER})\s*({_UNIT})"),
     "between"),
    # 不满 1 年 / 未满 1 年 / 1 年以下 / 1 年及以下
    (re.compile(rf"(?:不满|未满|不足|少于|低于)\s*({_NUMBER})\s*({_UNIT})"), "below"),
    (re.compile(rf"({_NUMBER})\s*({_UNIT})\s*(?:以下|及以下|以内)"), "below"),
    # 满 20 年及以上 / 20 年以上 / 超过 20 年
    (re.compile(rf"(?:满|超过|大于|多于)\s*({_NUMBER})\s*({_UNIT})"), "above"),
    (re.compile(rf"({_NUMBER})\s*({_UNIT})\s*(?:以上|及以上)"), "above"),
)


@dataclass(frozen=True)
class Quantity:
    value: float
    unit: str


@dataclass(frozen=True)
class Range:
    low: float
    high: float  # math.inf when open
    unit: str

    def holds(self, quantity: Quantity) -> bool:
        return self.unit == quantity.unit and self.low <= quantity.value < self.high


def number(text: str) -> float | None:
    """"3", "1,000", "2.5", "三", "十二", "两", "一万" as numbers; None when it is none."""
    text = text.replace(",", "").strip()
    if not text:
        return None
    if text[0].isdigit():
        try:
            return float(text)
        except ValueError:
            return None
    return _chinese_number(text)


def _chinese_number(text: str) -> float | None:
    digits = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
              "八": 8, "九": 9}
    scales = {"十": 10, "百": 100, "千": 1000, "万": 10000}
    total, section, current = 0, 0, 0
    for ch in text:
        if ch in digits:
            current = digits[ch]
        elif ch in scales:
            scale = scales[ch]
            if scale == 10000:
                total += (section + current) * scale
                section = current = 0
            else:
                section += (current or 1) * scale
                current = 0
        else:
            return None
    return float(total + section + current)


def stated_quantities(question: str) -> tuple[Quantity, ...]:
    """The quantities the question gives (not the ones it asks for)."""
    text = unicodedata.normalize("NFKC", question)
    found = []
    for match in _STATED.finditer(text):
        if _ASKED_BEFORE.search(text[: match.start()]):
            continue
        value = number(match.group(1))
        if value is None:
            continue
        if "万" in match.group(0)[len(match.group(1)):]:
            value *= 10000
        found.append(Quantity(value, _UNITS[match.group(2)]))
    return tuple(dict.fromkeys(found))


def ranges_in(text: str) -> tuple[Range, ...]:
    text = unicodedata.normalize("NFKC", text)
    found: list[Range] = []
    taken: list[tuple[int, int]] = []
    for pattern, kind in _RANGE_PATTERNS:
        for match in pattern.finditer(text):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue
            groups = match.groups()
            if kind == "low_high":
                low, high = number(groups[0]), number(groups[2])
                unit = _UNITS[groups[3]]
            elif kind == "between":
                low, high = number(groups[0]), number(groups[1])
                unit = _UNITS[groups[2]]
                high = high + 1 if high is not None and high.is_integer() else high  # "1–10 年" takes 10
            elif kind == "below":
                low, high, unit = 0.0, number(groups[0]), _UNITS[groups[1]]
            else:
                low, high, unit = number(groups[0]), math.inf, _UNITS[groups[1]]
            if low is None or high is None or low >= high:
                continue
            taken.append(match.span())
            found.append(Range(low, high, unit))
    return tuple(found)


def fit(quantities: tuple[Quantity, ...], text: str) -> int:
    """1: a range of the text takes a stated quantity in; -1: the text has ranges of a stated
    quantity's unit and none takes it in; 0: no range of that unit (or nothing stated)."""
    if not quantities:
        return 0
    ranges = ranges_in(text)
    relevant = [r for r in ranges if any(r.unit == q.unit for q in quantities)]
    if not relevant:
        return 0
    return 1 if any(r.holds(q) for r in relevant for q in quantities) else -1
