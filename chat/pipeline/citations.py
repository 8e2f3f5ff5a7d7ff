"""Citations, built from the selected evidence — never parsed from
what the model wrote — plus the supporting sentence of each answer line.

`build_citations` runs before generation: one citation per context item, numbered like the
context, each with the sentence that best covers the question (`line = -1`), so a client can
show sources while the answer streams. `attach_support` runs after: for every answer line that
cites `[来源 N]` it finds the sentence of source N that the line quotes (exact) or best covers
(lexically), as a span of the chunk it lies in (a Small2Big context spans several chunks) and of
the citation's `text`. A reader then lands on that sentence, not on the whole chunk.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from chat.contracts import Citation, SupportSpan
from engines.lexical import content_terms, coverage, normalise, sentence_spans
from knowledge.locators import locator_label

from .confidence import fact_units
from .context import ContextItem
from .generation import is_declined

_CITATION = re.compile(r"\[来源 (\d+)\]\(citation://\d+\)")
_IMAGE = re.compile(r"!\[[^\]\n]*\]\(asset://\d+\)")


def readable_markers(answer: str) -> str:
    """The answer with each citation link written as the reader sees it, "[来源 N]": for pages
    and protocols that show the text as it is, not the chat page's markdown (an OpenAI or MCP
    client has no `citation://` to resolve; it gets the sources beside the text)."""
    return _CITATION.sub(lambda m: f"[来源 {m.group(1)}]", answer)


# The citation link piece by piece: literal parts, and None for a run of digits.
_LINK_PARTS = ("[来源 ", None, "](citation://", None, ")")


def _may_become_link(tail: str) -> bool:
    """`tail` (from a "[") is the start of a citation link that more text may complete."""
    position = 0
    for part in _LINK_PARTS:
        rest = tail[position:]
        if not rest:
            return True
        if part is None:
            digits = len(rest) - len(rest.lstrip("0123456789"))
            if not digits:
                return False
            position += digits
        elif rest.startswith(part):
            position += len(part)
        else:
            return part.startswith(rest)
    return False  # complete: nothing left to wait for


class ReadableMarkerStream:
    """`readable_markers` over an answer that arrives in deltas: a delta that ends inside what
    may still become a citation link holds that end back until the link completes (or cannot)."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        text, self._held = self._held + text, ""
        start = text.rfind("[")
        if start >= 0 and _may_become_link(text[start:]):
            text, self._held = text[:start], text[start:]
        return readable_markers(text)

    def flush(self) -> str:
        held, self._held = self._held, ""
        return readable_markers(held)


@dataclass(frozen=True)
class SourceBase:
    """How a citation names the knowledge base its source belongs to."""

    slug: str
    name: str


def build_citations(
    items: tuple[ContextItem, ...], *, question: str, bases: Mapping[int, SourceBase] = MappingProxyType({})
) -> tuple[Citation, ...]:
    terms = content_terms(question)
    citations = []
    for item in items:
        span = _best_sentence(item.text, terms)
        spans = (
            (SupportSpan(line=-1, chunk_id=None, start=-1, end=-1, text_start=span[0], text_end=span[1],
                         text=item.text[span[0]:span[1]]),)
            if span else ()
        )
        if item.kind == "faq":
            citations.append(
                Citation(
                    number=item.number, kind="faq", title=item.faq.question, text=item.text,
                    score=item.faq.score, relevance=round(item.relevance.score, 4),
                    faq_id=item.faq.faq_id, content_type="faq", spans=spans,
                    **_base_fields(bases, item.faq.kb_id),
                )
            )
            continue
        result = item.result
        if result.from_web:
            citations.append(web_citation(item, spans=spans))
            continue
        citations.append(
            Citation(
                number=item.number, kind="chunk", title=result.document_title, text=item.text,
                score=result.score, relevance=round(item.relevance.score, 4),
                chunk_id=result.chunk_id, document_id=result.document_id, locator=dict(result.locator),
                locator_label=locator_label(result.locator), heading_path=tuple(result.heading_path),
                content_type=result.content_type, context_chunk_ids=tuple(result.context_chunk_ids),
                preview_url=getattr(result, "preview_url", None),
                assets=tuple(a.as_dict() for a in result.assets), spans=spans,
                **_base_fields(bases, result.kb_id),
            )
        )
    return tuple(citations)


def web_citation(item: ContextItem, *, spans: tuple[SupportSpan, ...]) -> Citation:
    """A web page's citation: its title, site and address, and no knowledge base, chunk or
    document (it is none of the knowledge base's content)."""
    result = item.result
    return Citation(
        number=item.number, kind="web", title=result.document_title, text=item.text, score=result.score,
        relevance=round(item.relevance.score, 4), content_type="web", spans=spans, url=result.url,
        site=result.site,
    )


def _base_fields(bases: Mapping[int, SourceBase], kb_id: int) -> dict[str, str]:
    base = bases.get(kb_id)
    return {"knowledge_base": base.slug, "knowledge_base_name": base.name} if base is not None else {}


def faq_citation(hit, *, number: int = 1, bases: Mapping[int, SourceBase] = MappingProxyType({})) -> Citation:
    """The one source of a FAQ answered directly: the curated answer itself."""
    text = f"常见问题：{hit.question}\n标准答案：{hit.answer}"
    start = text.index("标准答案：") + len("标准答案：")
    return Citation(
        number=number, kind="faq", title=hit.question, text=text, score=hit.score,
        relevance=hit.score, faq_id=hit.faq_id, content_type="faq", cited=True,
        spans=(SupportSpan(line=0, chunk_id=None, start=-1, end=-1, text_start=start, text_end=len(text),
                           text=text[start:]),),
        **_base_fields(bases, hit.kb_id),
    )


def attach_support(
    citations: tuple[Citation, ...], *, answer: str, chunk_texts: Mapping[int, str]
) -> tuple[Citation, ...]:
    """Citations with the spans that support each answer line citing them, and `cited` set."""
    by_number = {c.number: c for c in citations}
    spans: dict[int, list[SupportSpan]] = {c.number: [] for c in citations}
    body = answer.split("\n\n参考来源：")[0]
    for line_index, unit in enumerate(fact_units(body)):
        numbers = [int(n) for n in _CITATION.findall(unit)]
        if not numbers:
            continue
        # The answer filter writes a "<" that would open a tag as "&lt;"; the source has "<".
        claim = _IMAGE.sub("", _CITATION.sub("", unit)).replace("&lt;", "<").strip()
        pieces = [row for row in claim.splitlines() if row.strip()] or [claim]
        for number in dict.fromkeys(numbers):
            citation = by_number.get(number)
            if citation is None:
                continue
            for piece in pieces:
                span = _support_span(citation, piece, line_index, chunk_texts)
                if span is not None and span not in spans[number]:
                    spans[number].append(span)
    updated = []
    for citation in citations:
        found = spans[citation.number]
        if found:
            updated.append(replace(citation, spans=tuple(found), cited=True))
        else:
            updated.append(citation)
    return tuple(updated)


def reference_tail(citations: tuple[Citation, ...], *, limit: int) -> str:
    """An answer without inline citations gets its top sources listed at the end
    (it does not count as inline citation in the verification)."""
    if not citations:
        return ""
    refs = "；".join(f"[来源 {c.number}](citation://{c.number}) {c.title}" for c in citations[:limit])
    return f"\n\n参考来源：{refs}"


# --- spans --------------------------------------------------------------------------------------


def _best_sentence(text: str, terms: list[str]) -> tuple[int, int] | None:
    best, best_score = None, 0.0
    for start, end in sentence_spans(text):
        if end - start < 2:
            continue
        score = coverage(terms, text[start:end]).score if terms else 0.0
        if score > best_score:
            best, best_score = (start, end), score
    return best


def _support_span(citation: Citation, claim: str, line: int, chunk_texts: Mapping[int, str]) -> SupportSpan | None:
    text = citation.text
    claim = claim.strip().strip("|").strip() if claim.startswith("|") else claim.strip()
    bounds = _find_across_lines(text, claim) if len(claim) >= 2 else None
    if bounds is None:
        bounds = _best_sentence(text, content_terms(claim))
        if bounds is None:
            return None
    sentence = text[bounds[0]:bounds[1]]
    chunk_id, start, end = _in_chunk(citation, sentence, chunk_texts)
    return SupportSpan(
        line=line, chunk_id=chunk_id, start=start, end=end,
        text_start=bounds[0], text_end=bounds[1], text=sentence,
    )


def _find_across_lines(text: str, claim: str) -> tuple[int, int] | None:
    """Where the claim is in the text, also when the source broke it over lines (a PDF's line
    wraps, which the local composer joins into one sentence)."""
    position = text.find(claim)
    if position >= 0:
        return position, position + len(claim)
    if "\n" not in text:
        return None
    kept = [i for i, ch in enumerate(text) if ch != "\n"]
    position = "".join(text[i] for i in kept).find(claim)
    if position < 0:
        return None
    return kept[position], kept[position + len(claim) - 1] + 1


def _in_chunk(citation: Citation, sentence: str, chunk_texts: Mapping[int, str]) -> tuple[int | None, int, int]:
    """Which chunk of the citation's context holds the sentence, and where."""
    if citation.kind != "chunk":
        return None, -1, -1
    order = [citation.chunk_id, *[i for i in citation.context_chunk_ids if i != citation.chunk_id]]
    for chunk_id in order:
        content = chunk_texts.get(chunk_id)
        if content is None:
            continue
        position = content.find(sentence)
        if position >= 0:
            return chunk_id, position, position + len(sentence)
    return citation.chunk_id, -1, -1


# --- citations an answerer omitted ---------------------------------------------------------------

_MARKER_AT_START = re.compile(r"\s*\[来源 (\d+)\]\(citation://\d+\)")
# Where a sentence ends: the text up to here is one claim. Full-width marks and line breaks
# only: ASCII ones also stand inside entities the answer filter wrote ("&lt;"), image markup
# ("![…]") and numbers.
_SENTENCE_END = re.compile(r"[。！？；]+|\n")


class EvidenceCiter:
    """The answer as it streams, each sentence that carries no citation marker given the marker
    of the source it rests on: the source whose text holds the largest share of the sentence's
    content words, when that share reaches `min_support` (chosen from
    `benchmarks/citation_attachment.py`). A small model that cites nothing is then cited
    sentence by sentence, not with a trailing list of sources.

    Text goes out as it comes; only a sentence's end ("。", a line break) is held until the next
    text shows whether the answerer's own marker follows it ("。[来源 2](…)"). An attached marker
    goes before the end. Declines, table rows, headings, images, code and sentences resting on
    no source get nothing. Fed the answer filter's output, whose markers are whole."""

    def __init__(self, sources: Mapping[int, str], *, min_support: float) -> None:
        self._sources = {number: normalise(text) for number, text in sources.items()}
        self.min_support = min_support
        self.attached: list[int] = []  # the markers added, by source number
        self._pending = ""  # text after a held end, not yet enough to decide on
        self._sentence = ""  # the current sentence as sent so far
        self._line = ""  # the current line as sent so far (a table row, a heading, a code fence)
        self._end: str | None = None  # the current sentence's end, held
        self._in_code = False

    def feed(self, text: str) -> str:
        self._pending += text
        return self._drain(final=False)

    def flush(self) -> str:
        return self._drain(final=True)

    def release(self) -> str:
        """What is held, as it is (the stream broke: nothing is attached to a cut answer)."""
        held = (self._end or "") + self._pending
        self._end, self._pending = None, ""
        return held

    def _drain(self, *, final: bool) -> str:
        out: list[str] = []
        text, self._pending = self._pending, ""
        while True:
            if self._end is not None:
                after = text.lstrip()
                opening = after.startswith("[来源 ") or "[来源 ".startswith(after)
                if not final and (not after or opening and ")" not in after):
                    # Nothing yet, or the start of a marker: whether the answerer cites this
                    # sentence is still open.
                    self._pending = text
                    break
                consumed = 0
                while (marker := _MARKER_AT_START.match(text, consumed)) is not None:
                    consumed = marker.end()
                if consumed:
                    # The answerer cited the sentence after its end: sent as it is.
                    out.append(self._end + text[:consumed])
                    text = text[consumed:]
                else:
                    out.append(self._marker() + self._end)
                self._closed(self._end)
            if not text:
                if final and self._sentence.strip():
                    out.append(self._marker())
                    self._closed("")
                break
            end = _SENTENCE_END.search(text)
            if end is None:
                out.append(text)
                self._sentence += text
                self._line += text
                text = ""
                continue
            out.append(text[:end.start()])
            self._sentence += text[:end.start()]
            self._line += text[:end.start()]
            self._end = end.group(0)
            text = text[end.end():]
        return "".join(out)

    def _closed(self, end: str) -> None:
        if end == "\n" or not end:
            if self._line.lstrip().startswith("```"):
                self._in_code = not self._in_code
            self._line = ""
        else:
            self._line += end
        self._sentence = ""
        self._end = None

    def _marker(self) -> str:
        """The marker for the sentence just ended ("" when it cites already or rests on nothing)."""
        line = self._line.lstrip()
        if self._in_code or line.startswith(("|", "#", "![", "```")) or _CITATION.search(self._sentence):
            return ""
        number = self._resting_on(self._sentence)
        if number is None:
            return ""
        self.attached.append(number)
        return f"[来源 {number}](citation://{number})"

    def _resting_on(self, sentence: str) -> int | None:
        terms = content_terms(sentence)
        if len(terms) < 2 or is_declined(sentence):
            return None
        best, best_share = None, 0.0
        for number, text in self._sources.items():
            share = coverage(terms, "", normalised_text=text).score
            if share > best_share:
                best, best_share = number, share
        return best if best_share >= self.min_support else None
