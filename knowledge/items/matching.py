"""Finding a knowledge base's items (products, models, services) in text, and scoring a
question against them.

Matching is on folded text (NFKC, lowercase, traditional → simplified, as the index folds it)
with any whitespace or hyphen allowed between characters, so "星河X3 Pro", "星河x3pro", "X3-Pro"
and a PDF line broken inside the name ("星河X3\nPro") are the same mention. The longest name
wins at each position and mentions never overlap: "星河X3 Pro" is one mention of X3 Pro, not also
one of X3. A name ending in a letter or digit must not run on into one ("X3" is not in "X35"),
and one starting with one must not follow one.

Scores say how sure a mention is, in [0, 1]:
- a name, alias or code written out: 1.0 (`exact`);
- a near miss of a name of at least `MIN_FUZZY_CHARS` characters (a typo, a missing character):
  the similarity of the two spellings;
- the item's group named alone ("星河路由器"): `group_score` for every item of the group, which
  the rules file places in the middle band, so the question is asked back rather than guessed.

Nothing here reads the database: the catalog is built from plain records (`CatalogItem`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cached_property

from engines.lexical import content_terms, fold, model_code_spans, normalise, term_weight, unwrap_groups

MIN_FUZZY_CHARS = 4
# jieba's IDF below which a word is too common to say a question is about the catalog's domain
# ("公司" 3.5, "系列" 6.6; "路由器" 11.5).
MIN_DOMAIN_WEIGHT = 8.0
_ALNUM = re.compile(r"[a-z0-9]")
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class CatalogItem:
    id: int
    name: str
    aliases: tuple[str, ...] = ()
    codes: tuple[str, ...] = ()
    group: str = ""
    group_aliases: tuple[str, ...] = ()
    description: str = ""

    @property
    def forms(self) -> tuple[str, ...]:
        """Every spelling that names this item alone: its name, aliases and codes, and the model
        code inside its name ("星河X3 Pro" → "X3 Pro"), which is how people shorten one."""
        implicit = tuple(model_code_spans(self.name))
        return tuple(dict.fromkeys(form.strip() for form in (self.name, *self.aliases, *self.codes, *implicit)
                                   if form and form.strip()))

    @property
    def group_forms(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(form.strip() for form in (self.group, *self.group_aliases) if form and form.strip()))


@dataclass(frozen=True)
class Mention:
    item_ids: tuple[int, ...]  # one for an item's own name; every item of the group for a group
    text: str  # as written
    start: int
    end: int
    kind: str  # "item" | "group"


@dataclass(frozen=True)
class ItemScore:
    item_id: int
    name: str
    score: float
    exact: bool
    matched: str  # the question's words that matched
    kind: str  # "exact" | "fuzzy" | "group"


_SEPARATOR = re.compile(r"[\s\-_·•/]")


def _is_alnum(char: str) -> bool:
    return bool(char) and _ALNUM.match(char) is not None


class ItemCatalog:
    """The items of one or more knowledge bases, ready to find in text.

    Names are looked up in the question with its separators removed (so "星河X3 Pro" and
    "星河x3pro" read alike), keyed by their first two characters, longest first; a name's ends
    are checked against the text as written, where a space still separates "星河X3" from "2年".
    """

    def __init__(self, items: Iterable[CatalogItem]) -> None:
        self.items: tuple[CatalogItem, ...] = tuple(items)
        self._by_id = {item.id: item for item in self.items}
        owners: dict[str, set[int]] = {}
        kinds: dict[str, str] = {}
        for item in self.items:
            for form in item.forms:
                owners.setdefault(normalise(form), set()).add(item.id)
                kinds[normalise(form)] = "item"
        for item in self.items:
            for form in item.group_forms:
                key = normalise(form)
                if kinds.get(key) == "item":
                    continue  # an item's own name beats a group spelled the same
                owners.setdefault(key, set()).add(item.id)
                kinds[key] = "group"
        self._owners = {key: tuple(sorted(ids)) for key, ids in owners.items() if key}
        self._kinds = kinds
        buckets: dict[str, list[str]] = {}
        for key in self._owners:
            buckets.setdefault(key[:2], []).append(key)
        self._buckets = {lead: sorted(keys, key=lambda k: (-len(k), k)) for lead, keys in buckets.items()}
        # Where a name may start: scanning for these in C skips the text that names nothing,
        # which is most of it (a catalog's names are read in every sentence an answer weighs).
        self._leads = re.compile(
            "(?=" + "|".join(re.escape(lead) for lead in sorted(self._buckets, key=len, reverse=True)) + ")"
        ) if self._buckets else None

    def __bool__(self) -> bool:
        return bool(self.items)

    def item(self, item_id: int) -> CatalogItem | None:
        return self._by_id.get(item_id)

    def names(self, item_ids: Iterable[int]) -> tuple[str, ...]:
        return tuple(self._by_id[i].name for i in item_ids if i in self._by_id)

    def mentions(self, text: str) -> list[Mention]:
        """Every item or group named in `text`, in order, none overlapping. Offsets are into
        `fold(text)`, which has the same length as `text` for the text people write (NFKC may
        change the length of rare compatibility characters; offsets are then approximate)."""
        if not self._owners or not text or self._leads is None:
            return []
        folded = fold(text)
        compact = _SEPARATOR.sub("", folded)
        if self._leads.search(compact) is None:
            return []
        positions = [i for i, char in enumerate(folded) if not _SEPARATOR.match(char)]
        found = []
        at = 0
        while at < len(compact):
            lead = self._leads.search(compact, at)
            if lead is None:
                break
            at = lead.start()
            match = self._longest_at(compact, at, folded, positions)
            if match is None:
                at += 1
                continue
            key, end = match
            first, last = positions[at], positions[end - 1]
            found.append(Mention(item_ids=self._owners[key], text=text[first:last + 1] or folded[first:last + 1],
                                 start=first, end=last + 1, kind=self._kinds[key]))
            at = end
        return found

    def _longest_at(self, compact: str, at: int, folded: str, positions: list[int]) -> tuple[str, int] | None:
        # Names of two characters or more are keyed by their first two, one-character names by
        # theirs: the first bucket holds only longer names than the second.
        for lead in dict.fromkeys((compact[at:at + 2], compact[at:at + 1])):
            for key in self._buckets.get(lead, ()):
                if not compact.startswith(key, at):
                    continue
                end = at + len(key)
                first, last = positions[at], positions[end - 1]
                # The name's ends in the text as written: "X3" is not in "X35" nor "AX3".
                if _is_alnum(key[0]) and first > 0 and _is_alnum(folded[first - 1]):
                    continue
                if _is_alnum(key[-1]) and last + 1 < len(folded) and _is_alnum(folded[last + 1]):
                    continue
                return key, end
        return None

    @cached_property
    def _domain_words(self) -> frozenset[str]:
        """The words the catalog's families and descriptions are made of ("路由器", "套装"),
        without its items' own names."""
        words = set()
        for item in self.items:
            for text in (*item.group_forms, item.description):
                words.update(normalise(word) for word in content_terms(text))
        # Common words ("公司", "系列") and the halves of a split Latin word ("wi", "fi") would ask
        # the model about questions that are not about any item.
        return frozenset(word for word in words if len(word) >= (3 if word.isascii() else 2)
                         and term_weight(word) >= MIN_DOMAIN_WEIGHT)

    def touches(self, text: str) -> bool:
        """Whether `text` may be about an item without naming one: it holds a word of the
        catalog's families or descriptions, or a model code."""
        folded = normalise(text)
        return bool(model_code_spans(text)) or any(word in folded for word in self._domain_words)

    def items_in(self, text: str) -> set[int]:
        """The items `text` names by their own names (a group alone tags nothing)."""
        return {i for mention in self.mentions(text) if mention.kind == "item" for i in mention.item_ids}

    @cached_property
    def _fuzzy_index(self) -> tuple[tuple[tuple[str, int], ...], dict[str, tuple[int, ...]]]:
        """The names long enough to be misspelt, and which of them hold each character pair."""
        forms = tuple(dict.fromkeys((normalise(form), item.id) for item in self.items for form in item.forms
                                    if len(normalise(form)) >= MIN_FUZZY_CHARS))
        pairs: dict[str, set[int]] = {}
        for number, (form, _item) in enumerate(forms):
            for pair in _pairs(form):
                pairs.setdefault(pair, set()).add(number)
        return forms, {pair: tuple(sorted(numbers)) for pair, numbers in pairs.items()}

    def score(self, text: str, *, group_score: float, min_fuzzy: float) -> tuple[ItemScore, ...]:
        """Every item `text` may be about with how sure that is, best first. Items named
        exactly come with 1.0; where nothing is named exactly, near misses of names, then the
        group, are tried."""
        mentions = self.mentions(text)
        best: dict[int, ItemScore] = {}

        def offer(candidate: ItemScore) -> None:
            current = best.get(candidate.item_id)
            if current is None or candidate.score > current.score:
                best[candidate.item_id] = candidate

        for mention in mentions:
            for item_id in mention.item_ids:
                item = self._by_id[item_id]
                if mention.kind == "item":
                    offer(ItemScore(item_id, item.name, 1.0, True, mention.text, "exact"))
                else:
                    offer(ItemScore(item_id, item.name, group_score, False, mention.text, "group"))
        if not any(score.exact for score in best.values()):
            for candidate in self._near_misses(text, mentions, min_fuzzy=min_fuzzy):
                offer(candidate)
        return tuple(sorted(best.values(), key=lambda s: (-s.score, s.name)))

    def _near_misses(self, text: str, mentions: Sequence[Mention], *, min_fuzzy: float) -> list[ItemScore]:
        """Windows of the question about as long as a name that spell it almost right
        ("星河X3 Por", "星河X3pr"). Windows inside a mention already found are skipped."""
        folded = fold(text)
        covered = set()
        for mention in mentions:
            covered.update(range(mention.start, mention.end))
        # Compare on the question without separators, remembering where each character was.
        chars = [(i, c) for i, c in enumerate(folded) if not re.match(r"[\s\W_]", c) and i not in covered]
        compact = "".join(c for _, c in chars)
        forms, pairs = self._fuzzy_index
        # Only names sharing half their character pairs with the question can be near misses of
        # it: the windows below are compared with those alone, whatever the catalog's size.
        shared: dict[int, int] = {}
        for pair in _pairs(compact):
            for number in pairs.get(pair, ()):
                shared[number] = shared.get(number, 0) + 1
        found = []
        for number, count in shared.items():
            form, item_id = forms[number]
            if count * 2 < len(form) - 1:
                continue
            width = len(form)
            digits = _DIGITS.findall(form)
            best_ratio, best_at = 0.0, None
            for size in (width - 1, width, width + 1):
                if size < MIN_FUZZY_CHARS - 1 or size > len(compact):
                    continue
                for start in range(0, len(compact) - size + 1):
                    window = compact[start:start + size]
                    if window[0] != form[0] and window[-1] != form[-1]:
                        continue  # a near miss keeps one end of the name
                    if _DIGITS.findall(window) != digits:
                        continue  # "星河X7" is another model than "星河X1", not a typo of it
                    ratio = SequenceMatcher(None, window, form, autojunk=False).ratio()
                    if ratio > best_ratio:
                        best_ratio, best_at = ratio, (start, size)
            if best_at is not None and best_ratio >= min_fuzzy and best_ratio < 1.0:
                start, size = best_at
                first, last = chars[start][0], chars[start + size - 1][0]
                item = self._by_id[item_id]
                found.append(ItemScore(item_id, item.name, round(best_ratio, 4), False,
                                       text[first:last + 1], "fuzzy"))
        return found


def _pairs(text: str) -> set[str]:
    return {text[i:i + 2] for i in range(len(text) - 1)}


def focus_text(text: str, *, catalog: ItemCatalog, item_ids: Iterable[int]) -> str:
    """`text` without the lines and sentences about other items only: the rows of a table or
    the sentences of a paragraph that name items of the catalog but none of `item_ids`.
    Lines and sentences naming no item (headers, general rules) stay."""
    wanted = set(item_ids)
    if not wanted or not catalog:
        return text
    kept_lines: list[str] = []
    # A sentence a page broke is judged whole: its second half alone may name only another item.
    # What is kept as it was keeps its line breaks.
    for line, written in unwrap_groups(text.split("\n")):
        named = catalog.items_in(line)
        if named and not named & wanted:
            continue
        focused = _focus_sentences(line, catalog=catalog, wanted=wanted) if (
            len(named) > 1 and not _is_table_row(line)) else line
        kept_lines.extend(written if focused == line else [focused])
    return "\n".join(kept_lines)


_SENTENCE = re.compile(r"[^。！？；!?;]+[。！？；!?;]*")


_CLAUSE = re.compile(r"[^，,；;]+[，,；;]*")


def _focus_sentences(line: str, *, catalog: ItemCatalog, wanted: set[int]) -> str:
    kept = []
    for sentence in _SENTENCE.findall(line):
        named = catalog.items_in(sentence)
        if not named:
            kept.append(sentence)
        elif named & wanted:
            # "其他型号：星河X1 1 年，星河X3 Pro 3 年。" keeps only the clauses about what was asked.
            kept.append(_focus_clauses(sentence, catalog=catalog, wanted=wanted) if named - wanted else sentence)
    return "".join(kept) if kept else line


def _focus_clauses(sentence: str, *, catalog: ItemCatalog, wanted: set[int]) -> str:
    clauses = _CLAUSE.findall(sentence)
    kept = [c for c in clauses if not (named := catalog.items_in(c)) or named & wanted]
    if not kept:
        return sentence
    text = "".join(kept)
    # The sentence keeps its end ("。") when the clause that carried it was left out.
    end = sentence.rstrip()[-1:]
    if end in "。！？!?" and not text.rstrip().endswith(end):
        text = text.rstrip().rstrip("，,；;") + end
    return text


def _is_table_row(line: str) -> bool:
    return line.lstrip().startswith("|")
