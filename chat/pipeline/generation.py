"""Stage 6: streaming generation with citation enforcement applied while the text streams.

`AnswerFilter` sits between the model and the client, so what the client receives is exactly
what is stored. The model quotes documents written by others and may follow instructions found
in them, so its output is treated as hostile markdown:
- citation markers for sources in the context become the canonical `[来源 N](citation://N)`
  (models also write `[来源 N]`, `【来源 N】`, `[N]`); markers for any other number are removed
  and counted — they point outside the context (`invalid_citation_numbers` in the verification);
- images survive only as `![alt](asset://ID)` with an ID from this message's results. Any other
  image — an external URL, an unknown asset, a title or spaces in the destination, brackets in
  the alt text, a reference-style image (`![x][ref]`) — is removed and counted; a `!` that does
  not start such an image never stays in front of a `[` (so no markdown renderer can build an
  image from it, whatever reference definitions the text carries);
- `citation:` and `asset:` outside those canonical forms, and `javascript:` / `vbscript:`, lose
  their scheme (`citation：//9`), so no link in the text can pose as a citation, fetch an asset
  or run a script, whichever renderer shows it;
- links are shown, not followed: an address (`http(s)://…`, `ftp://…`, `www.…`, `mailto:…`, an
  e-mail address), bare or as a link's destination, stays clickable only when its host is on the
  knowledge base's allow list (`knowledge/links.py`), written as `[address](<address>)` or
  `[label](<address>)`. Any other address is written as a code span, its whole text visible,
  which no markdown renderer turns into a link (GFM's autolinking included); a link's `](` and a
  reference definition's `]:` are broken (`] (`, `]：`), so its label is plain text and no
  reference can point anywhere;
- raw HTML cannot start: a `<` that would open a tag (`<img`, `</`, `<!--`, `<?`) is written
  `&lt;`, which markdown shows as the `<` the model wrote;
- control characters and bidirectional overrides are dropped (they could make the answer read
  differently from what it says).
Text that might still become one of these is held back until it is decided (bounded: a run
longer than `_MAX_HOLD` characters is released, and then as text that cannot become markup).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Protocol

from knowledge.links import allowed_href

_MAX_HOLD = 400
_ALT_MAX = 300  # characters of an image's alt text (or reference label) we wait for
_DEST_MAX = 1000  # characters of an image destination we wait for

_CITE_HEAD = re.compile(r"[\[【]\s*(?:来源\s*[:：]?\s*)?(\d{1,3})\s*[\]】]")
_CITE_PREFIX = re.compile(r"[\[【](\s*(来(源(\s*[:：]?\s*\d{0,3}\s*)?)?)?|\s*\d{1,3}\s*)?$")
_LINK = re.compile(r"\(\s*citation://(\d{1,3})\s*\)")
_LINK_PREFIX = "(citation://"
_ASSET_DEST = re.compile(r"\s*<?\s*asset://(\d{1,12})\s*>?\s*(?:\"[^\"]*\"|'[^']*')?\s*")
_CITATION_DEST = re.compile(r"\s*<?\s*citation://\d{1,3}\s*>?\s*")
# Schemes that must not survive as links: ours outside their canonical forms, and script URLs.
_SCHEMES = ("citation", "asset", "javascript", "vbscript")
_SCHEME = re.compile(r"(%s)\s*:" % "|".join(_SCHEMES), re.I)


def _prefixes(word: str) -> str:
    """A pattern for every non-empty prefix of `word` ("c", "ci", … "citation" + spaces)."""
    pattern = r"\s*"
    for char in reversed(word[1:]):
        pattern = f"(?:{char}{pattern})?"
    return word[0] + pattern


# The tail of the text that may still grow into a scheme ("cita" + "tion:").
_SCHEME_TAIL = re.compile(r"(?:%s)\Z" % "|".join(_prefixes(w) for w in _SCHEMES), re.I)
_TAG_START = re.compile(r"[A-Za-z/!?]")
# Where an address starts, as GFM renderers find one anywhere in text: a web scheme, "www.", a
# mailto: scheme, or an e-mail address (at most 64 characters before its "@", as in RFC 5321).
_ADDRESS = r"(?:https?|ftp)://|www\.|mailto:|(?P<local>[A-Za-z0-9._%+-]{1,64})@"
_ADDRESS_START = re.compile(_ADDRESS, re.I)
_TRIGGERS = re.compile(r"[\[【!<\]]|(?:%s)\s*:|%s" % ("|".join(_SCHEMES), _ADDRESS), re.I)
# Text at the end of what arrived that may still grow into an address ("htt" + "p://", "hr" +
# "@example.com"): held back like a scheme's beginning.
_ADDRESS_TAIL = re.compile(r"[A-Za-z0-9._%+-]{1,64}(?::/{0,2})?\Z")
_LOCAL_TAIL = re.compile(r"[A-Za-z0-9._%+-]{1,64}\Z")
# What a browser may still read as part of the address (a backslash is a "/" to it): more than a
# reader would, so an address is never vouched for on a shorter reading than the browser's (not
# "|", which ends a GFM table cell even inside a code span).
_URL_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#@!$&'()*+,;=%\\{}^]*")
_DOMAIN_CHARS = re.compile(r"[A-Za-z0-9._-]{0,253}")
_URL_TRAILING = ".,:;!?*_~'"
_MAIL_MAX = 253
# A link's destination that may be allowed: one address, an optional title, nothing else.
_INLINE_DEST = re.compile(r"[ \t]*<?([^\s<>()]+)>?(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'))?[ \t]*")
_TICKS = re.compile(r"`+")
# C0 and C1 controls but tab and newline, DEL, and the bidirectional embeddings, overrides and
# isolates.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


class _Address(str):
    """An address as the filter writes it: a link, or a code span (`fenced`: its fence is not the
    text's own)."""

    fenced = False


class _CodeSpan(_Address):
    """The address's text only: its fence is chosen when it is emitted, after the text before it."""

    fenced = True


class AnswerFilter:
    def __init__(self, *, valid_numbers: set[int], asset_ids: set[int], link_hosts: Iterable[str] = ()) -> None:
        self.valid_numbers = set(valid_numbers)
        self.asset_ids = set(asset_ids)
        self.link_hosts = tuple(link_hosts)
        self.removed_citations: list[int] = []
        self.blocked_images = 0
        self.cited_numbers: list[int] = []
        self.shown_links = 0  # addresses written as text
        self.kept_links = 0  # addresses of allowed hosts, kept as links
        self._pending = ""
        self._last = ""  # the last character emitted
        # Backtick runs of the text itself (not our own code spans): an address's code span is
        # fenced with a longer run, so no backtick of the text can open or close it.
        self._ticks_max = 0
        self._ticks_trailing = 0
        self._after_fence = False

    def feed(self, text: str) -> str:
        self._pending += _INVISIBLE.sub("", text)
        return self._drain(final=False)

    def flush(self) -> str:
        return self._drain(final=True)

    def release(self) -> str:
        """After a broken stream: what might have grown into markup goes out as text."""
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> str:
        text = self._pending
        out: list[str] = []
        position = 0
        while position < len(text):
            match = _TRIGGERS.search(text, position)
            if match is None:
                tails = [] if final else [t.start() for t in (_SCHEME_TAIL.search(text, position),
                                                           _ADDRESS_TAIL.search(text, position)) if t]
                tail = min(tails, default=None)
                end = tail if tail is not None and len(text) - tail < _MAX_HOLD else len(text)
                self._emit(out, text[position:end])
                position = end
                break
            step = self._at_trigger(text, match.start(), final)
            if step is None:  # undecided: wait for more text
                # An e-mail address may start before the trigger ("abwww.x" + "@y.com"): the
                # characters that could begin its local part wait too.
                held = _LOCAL_TAIL.search(text, position, match.start())
                end = held.start() if held else match.start()
                self._emit(out, text[position:end])
                position = end
                break
            self._emit(out, text[position:match.start()])
            piece, position = step
            self._emit(out, piece)
        self._pending = text[position:]
        return "".join(out)

    def _emit(self, out: list[str], piece: str) -> None:
        if not piece:
            return
        fenced = isinstance(piece, _Address) and piece.fenced
        if fenced:
            fence = "`" * (self._ticks_max + 1)
            piece = _CodeSpan(f"{fence}{piece}{fence}")
        if self._after_fence and piece[0] == "`":
            piece = " " + piece  # a backtick right after our closing fence would lengthen it
        elif isinstance(piece, _Address) and self._last in ("!", "\\", "`"):
            # After a "!" a link would read as an image; after a backslash or a backtick our
            # fence would not open.
            piece = " " + piece
        self._after_fence = fenced
        out.append(piece)
        self._last = piece[-1]
        if fenced:
            self._ticks_trailing = 0
            return
        runs = [len(run) for run in _TICKS.findall(piece)]
        if runs:
            leading = len(piece) - len(piece.lstrip("`"))
            first = runs[0] + (self._ticks_trailing if leading else 0)
            self._ticks_max = max(self._ticks_max, first, *runs)
        trailing = len(piece) - len(piece.rstrip("`"))
        self._ticks_trailing = (self._ticks_trailing + trailing) if trailing == len(piece) else trailing

    def _at_trigger(self, text: str, at: int, final: bool) -> tuple[str, int] | None:
        """Handle the markup that starts at `at`: (the text to emit for it, where to go on), or
        None to wait. Always moves on by at least one character when it does not wait."""
        head = text[at]
        if head == "!":
            return self._image(text, at, final)
        if head == "<":
            return self._tag(text, at, final)
        if head in "[【":
            return self._citation(text, at, final)
        if head == "]":
            return self._link_end(text, at, final)
        scheme = _SCHEME.match(text, at)
        if scheme is not None:
            return f"{scheme.group(1)}：", scheme.end()
        return self._address(text, at, final)

    def _link_end(self, text: str, at: int, final: bool) -> tuple[str, int] | None:
        """A "]" that may end a link's label: `](address)` stays a link for an allowed address
        only; `](…)` otherwise becomes `] (…)` (no renderer reads a link across the space, and
        what follows is text: an address in it is shown as one), `]:` becomes `]：`."""
        if at + 1 == len(text):
            return None if not final else ("]", at + 1)
        following = text[at + 1]
        if following == ":":
            return "]：", at + 2
        if following != "(":
            return "]", at + 1
        close = text.find(")", at + 2, at + 2 + _DEST_MAX)
        if close < 0:
            if not final and len(text) - at < _DEST_MAX:
                return None
            return "] ", at + 1
        destination = _INLINE_DEST.fullmatch(text, at + 2, close)
        href = self._allowed(destination.group(1)) if destination else None
        if href is None:
            return "] ", at + 1
        self.kept_links += 1
        return f"](<{href}>)", close + 1

    def _address(self, text: str, at: int, final: bool) -> tuple[str, int] | None:
        """An address starting at `at`, up to where a reader sees it end (not past a space, a
        quote, a bracket or a non-ASCII character, nor trailing punctuation)."""
        start = _ADDRESS_START.match(text, at)
        if start.group("local") is not None:
            domain = _DOMAIN_CHARS.match(text, start.end())
            if domain.end() == len(text) and not final and domain.end() - start.end() < _MAIL_MAX:
                return None
            name = domain.group().rstrip("._-")
            if "." not in name.strip("."):
                return text[at:start.end()], start.end()  # not an address: "a@b" stays text
            end = start.end() + len(name)
        else:
            run = _URL_CHARS.match(text, start.end(), at + _DEST_MAX)
            if run.end() == len(text) and not final and run.end() - at < _DEST_MAX:
                return None
            end = run.end()
            while end > start.end() and (text[end - 1] in _URL_TRAILING or (
                    text[end - 1] == ")" and text.count("(", at, end) < text.count(")", at, end))):
                end -= 1
        return self._shown(text[at:end]), end

    def _shown(self, address: str) -> str:
        href = self._allowed(address)
        if href is not None:
            self.kept_links += 1
            return _Address(f"[{address}](<{href}>)")
        self.shown_links += 1
        return _CodeSpan(_SCHEME.sub(lambda m: f"{m.group(1)}：", address))

    def _allowed(self, address: str) -> str | None:
        if _SCHEME.search(address):  # never vouch for an address that carries a script URL
            return None
        return allowed_href(address, self.link_hosts)

    def _citation(self, text: str, at: int, final: bool) -> tuple[str, int] | None:
        head = _CITE_HEAD.match(text, at)
        if head is None:
            if not final and len(text) - at < _MAX_HOLD and _CITE_PREFIX.fullmatch(text, at):
                return None
            return text[at], at + 1
        after = head.end()
        if text.startswith("(", after):
            link = _LINK.match(text, after)
            if link is None:
                rest = text[after:after + len(_LINK_PREFIX) + 8]
                if not final and len(text) - after < len(_LINK_PREFIX) + 6 and _could_be_link(rest):
                    return None
                consumed = after
            else:
                consumed = link.end()
        elif after == len(text) and not final:
            return None  # a link part may follow
        else:
            consumed = after
        number = int(head.group(1))
        marker = text[at:consumed]
        if number in self.valid_numbers:
            self.cited_numbers.append(number)
            # After a "!" the marker would read as an image.
            space = " " if self._last == "!" else ""
            return f"{space}[来源 {number}](citation://{number})", consumed
        if "来源" not in marker and "citation://" not in marker and (number == 0 or number > 99):
            # "[2024]" (a year) or "a[0]" in running text is not a citation.
            return marker, consumed
        self.removed_citations.append(number)
        return "", consumed

    def _image(self, text: str, at: int, final: bool) -> tuple[str, int] | None:
        if at + 1 == len(text):
            return None if not final else ("!", at + 1)
        if text[at + 1] != "[":
            return "!", at + 1
        close = _closing_bracket(text, at + 1)
        if close is None:
            return None if not final else ("", at + 1)
        if close < 0:
            return "", at + 1  # cannot be an image: the "!" goes, the rest is read as text
        after = close + 1
        if after == len(text):
            return None if not final else ("", at + 1)
        if text[after] == "(":
            end = text.find(")", after, after + _DEST_MAX)
            if end < 0:
                if not final and len(text) - after < _DEST_MAX:
                    return None
                return "", at + 1
            destination = text[after + 1:end]
            if _CITATION_DEST.fullmatch(destination):
                return "", at + 1  # "![来源 1](citation://1)": a citation after a "!"
            asset = _ASSET_DEST.fullmatch(destination)
            if asset and int(asset.group(1)) in self.asset_ids:
                alt = re.sub(r"[\[\]<>\\\n]+", " ", text[at + 2:close]).strip()
                return f"![{alt}](asset://{int(asset.group(1))})", end + 1
            self.blocked_images += 1
            return "", end + 1
        if text[after] == "[":  # "![alt][label]": an image wherever the label is defined
            end = _closing_bracket(text, after)
            if end is None and not final:
                return None
            if end is None or end < 0:
                return "", at + 1
            self.blocked_images += 1
            return "", end + 1
        return "", at + 1  # "![label]": the label stays, as text or a citation

    def _tag(self, text: str, at: int, final: bool) -> tuple[str, int] | None:
        if at + 1 == len(text):
            return None if not final else ("<", at + 1)
        return ("&lt;" if _TAG_START.match(text, at + 1) else "<"), at + 1


def _closing_bracket(text: str, start: int) -> int | None:
    """The index of the "]" closing the "[" at `start` (brackets nest, backslashes escape);
    None when the text ends first, -1 when it cannot close (a blank line, or too long)."""
    depth = 0
    index = start
    limit = min(len(text), start + _ALT_MAX)
    while index < limit:
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth == 0:
                return index
        elif char == "\n":
            following = index + 1
            while following < len(text) and text[following] in " \t":
                following += 1
            if following < len(text) and text[following] == "\n":
                return -1  # a blank line ends any bracket
        index += 1
    return None if limit == len(text) else -1


def _could_be_link(rest: str) -> bool:
    compact = rest.replace(" ", "")
    return _LINK_PREFIX.startswith(compact) or (compact.startswith(_LINK_PREFIX) and compact[len(_LINK_PREFIX):].isdigit())


class StreamStage(Protocol):
    """A step the answer's text passes through as it streams, which may hold some back."""

    def feed(self, text: str) -> str: ...

    def flush(self) -> str:
        """What it still holds, when the answer is complete."""
        ...

    def release(self) -> str:
        """What it still holds, when the stream broke before the answer was complete."""
        ...


def filtered_stream(deltas: Iterator[str], *stages: StreamStage) -> Iterator[str]:
    """The model's deltas through each stage in turn (the answer filter first); empty pieces are
    skipped. When the model's stream breaks, what the stages still held back is delivered first,
    as `release` gives it: the reader keeps everything the model said before the break."""
    try:
        for delta in deltas:
            piece = _through(stages, delta)
            if piece:
                yield piece
    except Exception:
        tail = _ending(stages, broke=True)
        if tail:
            yield tail
        raise
    tail = _ending(stages, broke=False)
    if tail:
        yield tail


async def afiltered_stream(deltas: AsyncIterator[str], *stages: StreamStage) -> AsyncIterator[str]:
    """`filtered_stream` for a model streaming on the event loop."""
    try:
        async for delta in deltas:
            piece = _through(stages, delta)
            if piece:
                yield piece
    except Exception:
        tail = _ending(stages, broke=True)
        if tail:
            yield tail
        raise
    tail = _ending(stages, broke=False)
    if tail:
        yield tail


def _through(stages: tuple[StreamStage, ...], text: str) -> str:
    for stage in stages:
        if not text:
            return ""
        text = stage.feed(text)
    return text


def _ending(stages: tuple[StreamStage, ...], *, broke: bool) -> str:
    """What every stage held, each stage's tail passed through the stages after it."""
    text = ""
    for stage in stages:
        text = (stage.feed(text) if text else "") + (stage.release() if broke else stage.flush())
    return text


DECLINE_PREFIXES = ("根据当前知识库无法确定", "信息不足，无法确认")


# What a model writes when it declines in its own words ("资料中没有提到…", "抱歉，无法回答…"):
# a decline only when the answer cites nothing, as an answer that cites a source says something.
_DECLINE_WORDS = re.compile(
    r"无法确定|无法回答|无法判断|不能确定|没有(?:提到|提及|提供|相关|找到|涉及|说明|包含)|未(?:提到|提及|提供|找到|涉及|说明)"
    r"|不包含|并未|资料(?:中)?(?:不足|没有)"
)


_COURTESY = re.compile(r"^(?:很?抱歉|对不起|不好意思|根据(?:提供的|所给的|现有的)?(?:资料|材料|信息|知识库)(?:中)?)$")
_CLAUSE = re.compile(r"[，,；;：:。！？!?\n]")


def is_declined(answer: str, *, cited: bool = False) -> bool:
    """The answer says the knowledge base cannot settle the question: it starts with our own
    words for that, or (citing no source) its first clause after any courtesy ("抱歉，…") does."""
    text = answer.strip()
    if text.startswith(DECLINE_PREFIXES):
        return True
    if cited:
        return False
    clauses = [c.strip() for c in _CLAUSE.split(text) if c.strip()]
    while clauses and _COURTESY.match(clauses[0]):
        clauses.pop(0)
    return bool(clauses) and bool(_DECLINE_WORDS.search(clauses[0]))
