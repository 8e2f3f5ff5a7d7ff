"""The turn as a table of stages: what each stage is called, what the reader is told while it
runs, whether it may wait on a model or an index, and what it does.

A stage reads the turn's typed slots the stages before it filled (`TurnState.route`,
`.preparation`, `.items`, `.focus`, `.faq`, `.documents`, `.selection`) and fills its own, or
ends the turn with a `FinalAnswer` (a direct answer, a FAQ, a clarifying question, the
insufficient-context answer). The runner (`RAGService._stages`) does the rest for every stage
alike: the status event, giving the database connection back before a stage that may wait, the
stage's timing and span, and checking for cancellation after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.utils.functional import Promise

from retrieval.federation import DocumentSearch, FaqSearch

from ..contracts import Citation, Clarification, HitType, IntentResult
from .state import TurnState


@dataclass(frozen=True)
class Searches:
    """The turn's searchers, built once for its knowledge bases."""

    documents: DocumentSearch
    faqs: FaqSearch


@dataclass(frozen=True)
class FinalAnswer:
    """A stage's answer that needs no answerer: fixed text, stored and streamed as it is."""

    hit_type: HitType
    answer: str
    intent: IntentResult
    citations: tuple[Citation, ...] = ()
    top_score: float = 0.0
    faq_ids: tuple[int, ...] = ()
    clarify: Clarification | None = None


@dataclass(frozen=True)
class Stage:
    # The stage's name in timings, traces and status events.
    name: str
    run: Callable[[TurnState, Searches], FinalAnswer | None]
    # What the reader is told while it runs (translated when sent); None: nothing.
    status: Promise | None = None
    # It may wait on a model or an index: the turn holds no connection meanwhile.
    waits: bool = False
    # Whether the stage runs for this turn (the item confirmation only where there is a catalog).
    applies: Callable[[TurnState], bool] = lambda turn: True
