"""What an answerer is given: the question and its numbered sources, typed."""

from __future__ import annotations

from dataclasses import dataclass

from .focus import ItemFocus


@dataclass(frozen=True)
class SourceImage:
    asset_id: int
    caption: str  # defused, one line, at most 80 characters

    @property
    def line(self) -> str:
        """How an answer shows the image: the only image markdown the answer filter lets through."""
        return f"![{self.caption}](asset://{self.asset_id})"


@dataclass(frozen=True)
class AnswerSource:
    """One numbered source: its citation number is the only number an answer may cite."""

    number: int
    kind: str  # "chunk" | "faq" | "web"
    title: str  # one line: "员工手册 > 年假 · 第 3 页", "常见问题：…", "网络来源：…"
    text: str  # the body, defused (text that looks like our markup cannot pose as it)
    images: tuple[SourceImage, ...] = ()


@dataclass(frozen=True)
class PastTurn:
    question: str
    answer: str


@dataclass(frozen=True)
class AnswerRequest:
    question: str
    sources: tuple[AnswerSource, ...]
    history: tuple[PastTurn, ...] = ()
    kb_name: str = ""
    contact: str = ""  # whom a reader may ask when the sources do not settle the question
    # Which items the question is about (the turn's one focus); None: the question's model codes.
    focus: ItemFocus | None = None
