"""Stage 6: streaming generation with citation enforcement applied while the text streams.

`AnswerFilter` sits between the model and the client, so what the client receives is exactly
what is stored:
- citation markers for sources in the context become the canonical `[来源 N](citation://N)`
  (models also write `[来源 N]`, `【来源 N】`, `[N]`); markers for any other number are removed
  and counted — they point outside the context (seed 003 §4.2.2 `invalid_citation_numbers`);
- images survive only as `![alt](asset://ID)` with an ID from this message's results; any other
  image (an external URL, an unknown asset) is removed and counted, so no client ever fetches it.
Text that might still become a marker is held back until it is decided (bounded: a run longer
than `_MAX_HOLD` characters is released as text).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_MAX_HOLD = 400

_CITE_HEAD = re.compile(r"[\[【]\s*(?:来源\s*[:：]?\s*)?(\d{1,3})\s*[\]】]")
_CITE_PREFIX = re.compile(r"[\[【](\s*(来(源(\s*[:：]?\s*\d{0,3}\s*)?)?)?|\s*\d{1,3}\s*)?$")
_LINK = re.compile(r"\(\s*citation://(\d{1,3})\s*\)")
_LINK_PREFIX = "(citation://"
_IMAGE = re.compile(r"!\[([^\]\n]{0,300})\]\(([^)\s]{0,1000})\)")
_IMAGE_PREFIX = re.compile(r"!(\[[^\]\n]{0,300}(\](\([^)\s]{0,1000})?)?)?$")
_ASSET = re.compile(r"asset://(\d{1,12})")
_TRIGGERS = re.compile(r"[\[【!]")


class AnswerFilter:
    def __init__(self, *, valid_numbers: set[int], asset_ids: set[int]) -> None:
        self.valid_numbers = set(valid_numbers)
        self.asset_ids = set(asset_ids)
        self.removed_citations: list[int] = []
        self.blocked_images = 0
        self.cited_numbers: list[int] = []
        self._pending = ""

    def feed(self, text: str) -> str:
        self._pending += text
        return self._drain(final=False)

    def flush(self) -> str:
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> str:
        out: list[str] = []
        while self._pending:
            match = _TRIGGERS.search(self._pending)
            if match is None:
                out.append(self._pending)
                self._pending = ""
                break
            out.append(self._pending[: match.start()])
            self._pending = self._pending[match.start():]
            consumed = self._at_trigger(final)
            if consumed is None:  # undecided: wait for more text
                break
            out.append(consumed)
        return "".join(out)

    def _at_trigger(self, final: bool) -> str | None:
        """Handle the markup that starts at the head of the buffer: the text to emit for it,
        or None to wait. Always consumes at least one character when it returns text."""
        text = self._pending
        if text[0] == "!":
            return self._image(text, final)
        return self._citation(text, final)

    def _citation(self, text: str, final: bool) -> str | None:
        head = _CITE_HEAD.match(text)
        if head is None:
            if not final and len(text) < _MAX_HOLD and _CITE_PREFIX.fullmatch(text):
                return None
            return self._emit_literal(1)
        rest = text[head.end():]
        if rest.startswith("("):
            link = _LINK.match(rest)
            if link is None:
                if not final and len(rest) < len(_LINK_PREFIX) + 6 and _could_be_link(rest):
                    return None
                consumed = head.end()
            else:
                consumed = head.end() + link.end()
        elif not rest and not final:
            return None  # a link part may follow
        else:
            consumed = head.end()
        number = int(head.group(1))
        marker = text[:consumed]
        self._pending = text[consumed:]
        if number in self.valid_numbers:
            self.cited_numbers.append(number)
            return f"[来源 {number}](citation://{number})"
        if "来源" not in marker and "citation://" not in marker and (number == 0 or number > 99):
            # "[2024]" (a year) or "a[0]" in running text is not a citation.
            return marker
        self.removed_citations.append(number)
        return ""

    def _image(self, text: str, final: bool) -> str | None:
        image = _IMAGE.match(text)
        if image is None:
            if not final and len(text) < _MAX_HOLD and _IMAGE_PREFIX.fullmatch(text):
                return None
            return self._emit_literal(1)
        self._pending = text[image.end():]
        asset = _ASSET.fullmatch(image.group(2).strip())
        if asset and int(asset.group(1)) in self.asset_ids:
            alt = re.sub(r"[\[\]]", "", image.group(1)).strip()
            return f"![{alt}](asset://{int(asset.group(1))})"
        self.blocked_images += 1
        return ""

    def _emit_literal(self, count: int) -> str:
        piece, self._pending = self._pending[:count], self._pending[count:]
        return piece


def _could_be_link(rest: str) -> bool:
    compact = rest.replace(" ", "")
    return _LINK_PREFIX.startswith(compact) or (compact.startswith(_LINK_PREFIX) and compact[len(_LINK_PREFIX):].isdigit())


def filtered_stream(deltas: Iterator[str], answer_filter: AnswerFilter) -> Iterator[str]:
    """The model's deltas through the filter; empty pieces are skipped."""
    for delta in deltas:
        piece = answer_filter.feed(delta)
        if piece:
            yield piece
    tail = answer_filter.flush()
    if tail:
        yield tail


DECLINE_PREFIXES = ("根据当前知识库无法确定", "信息不足，无法确认")


def is_declined(answer: str) -> bool:
    return answer.strip().startswith(DECLINE_PREFIXES)
