"""Text from documents and readers made safe to put in front of an answerer, and clipped."""

from __future__ import annotations

import re

_SOURCE_MARK = re.compile(r"[\[【]\s*来源")
_CONTEXT_TAG = re.compile(r"<\s*/?\s*knowledge_context\s*>", re.I)
_SCHEMES = re.compile(r"\b(citation|asset)\s*:\s*//", re.I)
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])")


def defuse(text: str) -> str:
    """Make document text unable to pose as our markup inside a prompt or an answer."""
    text = _CONTEXT_TAG.sub(lambda m: m.group(0).replace("<", "‹").replace(">", "›"), text)
    text = _SOURCE_MARK.sub(lambda m: m.group(0).replace("[", "［").replace("【", "［"), text)
    return _SCHEMES.sub(lambda m: f"{m.group(1)}：//", text)


def clip(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a sentence end when one is near."""
    text = text.strip()
    if len(text) <= limit:
        return text
    head = text[:limit]
    ends = [m.start() for m in _SENTENCE_END.finditer(head)]
    cut = ends[-1] if ends and ends[-1] > limit * 0.6 else limit
    return head[:cut].rstrip() + "…"
