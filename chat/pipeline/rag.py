"""RAGService: one question through stages 0–7, as a stream of events.

    stage 0  context          validate, access, conversation, trace id, stored question
    stage 1  routing          direct answer | FAQ exact | retrieval
    stage 2  preparation      history, follow-up rewrite, intent, plan, variants
    stage 2b items            which product the question is about (rules A–C), see items.py
    stage 3  FAQ retrieval    threshold direct answer, fast-path candidates reused
    stage 4  documents        RetrievalService (the same one the API and the hit test use)
    stage 5  context          relevance floor, budgets, numbering, citations | insufficient
                              | a clarifying question (rule C, the best evidence about candidates)
    stage 6  generation       streamed through citation enforcement, verified, confidence
    stage 7  persistence      answer + evidence + trace in one transaction

Stages 1–5 are a declared table (`RAGService._table`, `stages.Stage`): each reads the turn's
typed slots and fills its own or ends the turn with a `FinalAnswer`; the runner sends each
stage's status, gives the database connection back before a stage that may wait, times it and
checks for cancellation after it. Which items the question is about is one value, the turn's
`ItemFocus`, set by the item confirmation and read by retrieval, context and the answerer.

Streaming and non-streaming callers share this one generator: everything up to
the `Evidence` event is preparation and raises ordinary errors; after it the answer streams.
Closing the generator or setting `cancel` stops it: retrieval and the model call are abandoned
and the turn is stored as cancelled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _lazy

from engines.lexical import visible_text
from engines.ports import ChatModel, ProviderError
from engines.providers import get_chat_model, web_search_configured
from knowledge.access import access_knowledge_base, access_knowledge_bases
from knowledge.models import KnowledgeBase
from knowledge.documents.selectors import chunk_contents
from knowledge.items.selectors import catalog_for
from ragsite.db import release_connection
from ragsite.errors import DomainError
from retrieval.contracts import RetrievalCancelled, RetrievalError, RetrievalRequest
from retrieval.factory import build_scope_faqs, build_scope_retrieval
from retrieval.federation import DocumentSearch, FaqSearch

from .. import selectors, services
from ..answering.factory import answerer_for, evidence_judge
from ..answering.ports import Answerer, AsyncAnswerer, EvidenceJudge
from ..answering.request import AnswerRequest
from ..access import access_conversation
from ..contracts import (
    AnswerConfidence,
    ChatError,
    ChatQuery,
    Citation,
    Clarification,
    ClarifyChoice,
    EvidenceConfidence,
    GenerationFailed,
    HitType,
    IntentResult,
    Requester,
    Route,
    TurnCancelled,
    TurnResult,
)
from ..models import Conversation
from .citations import EvidenceCiter, attach_support, build_citations, faq_citation, reference_tail
from .confidence import (
    NOT_APPLICABLE,
    SourceEvidence,
    answer_features,
    calculate_evidence_confidence,
    calculate_generation_confidence,
    combine_answer_confidence,
)
from .context import (
    ContextSelection,
    contact_tail,
    answer_request,
    decline_answer,
    select_context,
)
from .events import Delta, Event, Evidence, Finished, Started, Status
from .faq import search_faq
from .items import (
    ModelItemExtractor,
    clarify_answer,
    confirm_items,
    focus_of,
)
from .generation import AnswerFilter, afiltered_stream, filtered_stream, is_declined
from .preparation import (
    FollowUpRewriter,
    ModelFollowUpRewriter,
    Preparation,
    RuleFollowUpRewriter,
    prepare_retrieval,
)
from .routing import decide_route
from .stages import FinalAnswer, Searches, Stage
from .rules import Rules, load_rules
from .state import GenerationReport, TurnState

logger = logging.getLogger(__name__)

GENERATION_FAILED = "回答生成失败，请稍后重试。"
DIRECT_DELTA_CHARS = 24


class RAGService:
    def __init__(
        self,
        *,
        # Given the knowledge bases a question reads, the asked one first.
        retrieval: Callable[[Sequence[KnowledgeBase]], DocumentSearch] = build_scope_retrieval,
        faqs: Callable[[Sequence[KnowledgeBase]], FaqSearch] = build_scope_faqs,
        chat_model: Callable[[], ChatModel] = get_chat_model,
        rules: Callable[[], Rules] = load_rules,
        # The answerer for the chat model: the model itself when it writes, else the offline one.
        answerer: Callable[[ChatModel], Answerer] = answerer_for,
        # Whether the evidence answers, decided once whichever answerer writes.
        judge: Callable[[], EvidenceJudge | None] = evidence_judge,
    ) -> None:
        self._retrieval = retrieval
        self._faqs = faqs
        self._chat_model = chat_model
        self._rules = rules
        self._answerer = answerer
        self._judge = judge

    # --- entry point ------------------------------------------------------------------------

    def run(
        self, *, query: ChatQuery, requester: Requester, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        """The whole turn in the calling thread. An event-loop caller runs the same phases with
        the model's answer streamed on the loop instead (`chat.streaming.TurnRunner`)."""
        turn = self.open(query=query, requester=requester, cancel=cancel)
        try:
            pending = yield from self.prepare(turn)
            if pending is not None:
                yield from self.stream(pending)
                yield from self.conclude(pending)
        except BaseException as exc:
            raise self.failure(turn, exc)

    def answer(self, *, query: ChatQuery, requester: Requester) -> TurnResult:
        """The same turn, consumed to the end (the JSON API)."""
        result = None
        for event in self.run(query=query, requester=requester):
            if isinstance(event, Finished):
                result = event.result
        assert result is not None
        return result

    # --- phases -----------------------------------------------------------------------------
    # A turn is open → prepare → (stream → conclude) with `failure` for whatever goes wrong
    # after `open`. `prepare` and `conclude` read and write the database and compute; `stream`
    # and `astream` only wait on the model, which is why an event-loop caller can take them out
    # of its worker threads.

    def open(self, *, query: ChatQuery, requester: Requester, cancel: threading.Event | None = None) -> TurnState:
        """Stage 0: validate and check access, then store the question. Refusals raise before
        anything is stored."""
        received = time.perf_counter()
        question = visible_text(query.question)
        if not question:
            raise ChatError(_("问题不能为空。"), code="question_empty", http_status=400)
        max_chars = settings.RAG_MAX_QUESTION_CHARS
        if len(question) > max_chars:
            raise ChatError(
                _("问题过长（最多 %(n)s 个字符）。") % {"n": max_chars},
                code="question_too_long", http_status=400,
            )
        kb = access_knowledge_base(user=requester.user, kb_id=query.knowledge_base_id)
        also_kbs = self._also_kbs(query, requester, kb)
        conversation = self._conversation(query, requester, kb)
        rules = self._rules()

        history = (
            selectors.recent_turns(conversation_id=conversation.pk, limit=rules.follow_up.history_turns)
            if conversation is not None else ()
        )
        try:
            conversation, user_message = services.start_turn(
                kb=kb, requester=requester, question=question, conversation=conversation,
                client_id=query.client_id,
            )
        except DatabaseError as exc:
            # e.g. SQLite's lock wait running out under load: nothing was stored, say so plainly.
            logger.error("could not store the question: %s", exc)
            raise ChatError(_("暂时无法保存问题，请稍后重试。"), code="storage_unavailable", http_status=503) from exc
        return TurnState(
            query=query, requester=requester, kb=kb, question=question, conversation=conversation,
            user_message_id=user_message.pk, history=history, cancel=cancel or threading.Event(),
            started=received, kb_version=kb.active_version.number if kb.active_version_id else None,
            rules=rules, also_kbs=also_kbs,
        )

    def prepare(self, turn: TurnState) -> Generator[Event, None, PendingAnswer | None]:
        """Stages 1–5 up to the evidence: the answer that needs no model (direct, FAQ,
        insufficient context) is finished here (None); otherwise what the model is to answer."""
        yield Started(
            trace_id=turn.trace_id, conversation_id=turn.conversation.pk, user_message_id=turn.user_message_id,
            kb_id=turn.kb.slug, kb_name=turn.kb.name, kb_version=turn.kb_version, data_scope=turn.data_scope,
        )
        # Built inside the turn: a knowledge base the deployment cannot serve is a traced failure.
        searches = Searches(documents=self._retrieval(turn.scope), faqs=self._faqs(turn.scope))
        return (yield from self._stages(turn, searches=searches))

    def stream(self, pending: PendingAnswer) -> Iterator[Event]:
        """Stage 6, the model's answer read in this thread."""
        turn = pending.turn
        with turn.stage("llm_generation"):
            deltas = pending.answerer.stream(pending.request, max_tokens=pending.max_tokens,
                                             temperature=pending.temperature)
            try:
                for piece in filtered_stream(deltas, pending.answer_filter, pending.citer):
                    yield self._delivered(turn, piece)
            finally:
                close = getattr(deltas, "close", None)
                if close is not None:
                    close()

    async def astream(self, pending: PendingAnswer) -> AsyncIterator[Event]:
        """Stage 6 on the event loop, for an answerer that streams there (`AsyncAnswerer`): the
        same filter and bookkeeping as `stream`, no thread held while the model writes."""
        turn = pending.turn
        answerer = pending.answerer
        assert isinstance(answerer, AsyncAnswerer)
        with turn.stage("llm_generation"):
            deltas = answerer.astream(pending.request, max_tokens=pending.max_tokens,
                                      temperature=pending.temperature)
            pieces = afiltered_stream(deltas, pending.answer_filter, pending.citer)
            try:
                async for piece in pieces:
                    yield self._delivered(turn, piece)
            finally:
                await pieces.aclose()
                await deltas.aclose()

    @staticmethod
    def _delivered(turn: TurnState, piece: str) -> Delta:
        turn.check_cancelled()
        turn.mark_first_token()
        turn.delivered.append(piece)
        return Delta(piece)

    def failure(self, turn: TurnState, exc: BaseException) -> BaseException:
        """Store the turn that `exc` ended (cancelled or failed) unless its answer is already
        stored; the exception its caller raises in its place."""
        if isinstance(exc, GeneratorExit):
            # Gone after the answer was stored (before reading the end of the stream): the
            # turn is complete as it is; there is no failure to record.
            if not turn.stored:
                self._store_failure(turn, code="client_disconnected", error=None, cancelled=True)
            return exc
        if isinstance(exc, (TurnCancelled, RetrievalCancelled)):
            if not turn.stored:
                self._store_failure(turn, code="client_disconnected", error=None, cancelled=True)
            return _replacing(TurnCancelled("the client went away"), None)
        if isinstance(exc, (RetrievalError, DomainError)):
            self._store_failure(turn, code=exc.code, error=exc, cancelled=False)
            return exc
        if isinstance(exc, ProviderError):
            self._store_failure(turn, code=exc.code, error=exc, cancelled=False)
            return _replacing(GenerationFailed(_(GENERATION_FAILED)), exc)
        if isinstance(exc, DatabaseError):
            # e.g. the connection dropped while the answer and its evidence were committed: the
            # transaction rolled back whole; the failure is stored on a new connection.
            logger.error("turn %s: database error: %s", turn.trace_id, exc)
            self._store_failure(turn, code="storage_unavailable", error=exc, cancelled=False)
            return _replacing(ChatError(_("数据库暂时不可用，回答未能保存，请稍后重试。"),
                                        code="storage_unavailable", http_status=503), exc)
        if isinstance(exc, Exception):
            logger.error("turn %s failed", turn.trace_id, exc_info=exc)
            self._store_failure(turn, code="internal_error", error=exc, cancelled=False)
            return _replacing(GenerationFailed(_(GENERATION_FAILED)), exc)
        return exc

    # --- stages 1–7 -------------------------------------------------------------------------

    def _table(self) -> tuple[Stage, ...]:
        """Stages 1–5, in order. The turn holds a connection only while it reads or writes: it
        gives it back before each stage that may wait on a model or an index (a follow-up
        rewrite, a model reading the item, a remote query embedding, HyDE) and takes one again
        for its next query."""
        return (
            Stage("route", self._route, status=_lazy("正在进行查询路由...")),
            Stage("prepare", self._prepare, status=_lazy("正在识别问题意图..."), waits=True),
            Stage("item_confirm", self._confirm_items, status=_lazy("正在确认问题涉及的产品..."), waits=True,
                  applies=lambda turn: bool(turn.catalog)),
            Stage("faq_search", self._search_faqs, status=_lazy("正在检索业务 FAQ 知识库...")),
            Stage("doc_search", self._search_documents, status=_lazy("正在匹配相关业务资料..."), waits=True),
            Stage("context_build", self._build_context),
        )

    def _stages(self, turn: TurnState, *, searches: Searches) -> Generator[Event, None, PendingAnswer | None]:
        """The stage table, then the answerer: a stage's final answer ends the turn there."""
        for stage in self._table():
            if not stage.applies(turn):
                continue
            if stage.status is not None:
                yield Status(stage.name, str(stage.status))
            if stage.waits:
                release_connection()
            with turn.stage(stage.name):
                final = stage.run(turn, searches)
            if final is not None:
                yield from self._single_answer(turn, hit_type=final.hit_type, answer=final.answer,
                                               intent=final.intent, citations=final.citations,
                                               top_score=final.top_score, faq_ids=final.faq_ids,
                                               clarify=final.clarify)
                return None
            turn.check_cancelled()
        answerer = self._answerer(self._model())
        turn.model_name = answerer.name
        return (yield from self._begin_generation(turn, answerer=answerer))

    # --- stages 1–5 -------------------------------------------------------------------------

    def _route(self, turn: TurnState, searches: Searches) -> FinalAnswer | None:
        """Stage 1: a direct answer, an exact FAQ, or retrieval."""
        route = decide_route(question=turn.question, kb=turn.kb, also_kb_ids=turn.also_kb_ids, rules=turn.rules,
                             faqs=searches.faqs, cancel=turn.cancel)
        turn.route = route
        if route.fast_faq is not None:
            turn.record_search(cache=route.fast_faq.cache, degradations=route.fast_faq.degradations)
        if route.route == Route.DIRECT_ANSWER:
            return FinalAnswer(HitType.DIRECT_ANSWER, route.answer, route.intent)
        if route.route == Route.FAQ_EXACT:
            return FinalAnswer(HitType.FAQ_EXACT, route.answer, route.intent,
                               citations=(faq_citation(route.faq_hit, bases=turn.bases),), top_score=1.0,
                               faq_ids=(route.faq_hit.faq_id,))
        return None

    def _prepare(self, turn: TurnState, searches: Searches) -> None:
        """Stage 2: history, the follow-up rewrite, intent, plan and variants; then the item
        catalog the confirmation scores against."""
        rules = turn.rules
        prepared, degradations = prepare_retrieval(
            question=turn.question, history=turn.history, options=turn.query.options, rules=rules,
            rewriter=self._follow_up_rewriter(rules),
        )
        turn.degradations.extend(degradations)
        turn.preparation = prepared
        turn.catalog = catalog_for(kb_ids=[kb.pk for kb in turn.scope])
        turn.focus = focus_of(None, catalog=None, question=prepared.rewritten_query)

    def _confirm_items(self, turn: TurnState, searches: Searches) -> None:
        """Stage 2b: which item the question is about, and the focus every later stage reads."""
        prepared, catalog = turn.preparation, turn.catalog
        assert prepared is not None and catalog is not None
        confirmation, degradations = confirm_items(
            question=prepared.rewritten_query, history=turn.history, follow_up=prepared.follow_up,
            catalog=catalog, rules=turn.rules.items, chosen_item_ids=turn.query.item_ids,
            extractor=self._item_extractor(turn.rules),
        )
        turn.degradations.extend(degradations)
        turn.items = confirmation
        if confirmation.question != prepared.rewritten_query:
            prepared = replace(prepared, rewritten_query=confirmation.question,
                               variants=(confirmation.question, *prepared.variants[1:]))
            turn.preparation = prepared
        turn.focus = focus_of(confirmation, catalog=catalog, question=prepared.rewritten_query)

    def _search_faqs(self, turn: TurnState, searches: Searches) -> FinalAnswer | None:
        """Stage 3: FAQ retrieval; a FAQ above the direct threshold answers, unless it is about
        another item than the question's."""
        prepared, route = turn.preparation, turn.route
        assert prepared is not None and route is not None
        faq_stage = search_faq(question=turn.question, kb=turn.kb, also_kb_ids=turn.also_kb_ids,
                               prepared=prepared, route=route, faqs=searches.faqs, cancel=turn.cancel)
        if faq_stage.direct is not None and turn.items is not None and not turn.focus.admits_faq(
                faq_stage.direct.question):
            turn.items = replace(turn.items, faq_set_aside=faq_stage.direct.faq_id)
            faq_stage = replace(faq_stage, direct=None, direct_kind="")
        turn.faq = faq_stage
        if not faq_stage.reused_fast_path:
            turn.record_search(cache=faq_stage.response.cache, degradations=faq_stage.response.degradations)
        if faq_stage.direct is None:
            return None
        hit = faq_stage.direct
        return FinalAnswer(HitType.FAQ_EXACT if faq_stage.direct_kind == "exact" else HitType.FAQ_DIRECT,
                           hit.answer, prepared.intent, citations=(faq_citation(hit, bases=turn.bases),),
                           top_score=hit.score, faq_ids=(hit.faq_id,))

    def _search_documents(self, turn: TurnState, searches: Searches) -> None:
        """Stage 4: the same retrieval the API and the hit test use."""
        assert turn.preparation is not None
        documents = searches.documents.retrieve(_retrieval_request(turn, turn.preparation), cancel=turn.cancel)
        turn.record_search(cache=documents.trace.cache, degradations=documents.trace.degradations)
        turn.documents = documents

    def _build_context(self, turn: TurnState, searches: Searches) -> FinalAnswer | None:
        """Stage 5: the evidence the answer may use, numbered and cited; or a clarifying
        question, or the insufficient-context answer."""
        prepared, documents, faq_stage = turn.preparation, turn.documents, turn.faq
        assert prepared is not None and documents is not None and faq_stage is not None
        # Rows and sentences of shared text (one table for the whole range) about other items
        # only are not read: "X3 Pro 的保修期" must not be answered with X3's too.
        selection = select_context(
            question=prepared.rewritten_query, faq_hits=turn.focus.faq_hits(faq_stage.response.hits),
            doc_results=turn.focus.results(documents.results), plan=prepared.plan, rules=turn.rules.context,
            empty_reason=documents.trace.empty_reason, judge=self._judge(),
            answerer_judges=self._answerer_writes(),
        )
        turn.selection = selection
        turn.citations = build_citations(selection.items, question=prepared.rewritten_query, bases=turn.bases)
        clarification = self._clarification(turn, selection)
        if clarification is not None:
            turn.clarification = clarification
            return FinalAnswer(HitType.CLARIFY, clarify_answer(clarification), prepared.intent,
                               top_score=selection.top_score, clarify=clarification)
        if not selection.items:
            return FinalAnswer(HitType.INSUFFICIENT_CONTEXT,
                               decline_answer(turn.kb, reason=selection.insufficient_reason), prepared.intent,
                               top_score=selection.top_score)
        return None

    def _begin_generation(self, turn: TurnState, *, answerer: Answerer) -> Generator[Event, None, PendingAnswer]:
        """Stage 6 begins: the evidence sent, what the answerer is given."""
        prepared, selection, citations, rules = turn.preparation, turn.selection, turn.citations, turn.rules
        assert prepared is not None and selection is not None
        evidence_confidence = calculate_evidence_confidence(
            hit_type=HitType.RAG, retrieval_top_score=selection.top_score, context_count=len(selection.items),
            source_count=len(selection.sources), intent_rule_score=prepared.intent.rule_score,
            intent_decision_score=prepared.intent.confidence, history_rewrite_used=prepared.history_rewrite_used,
        )
        yield self._evidence(turn, hit_type=HitType.RAG, citations=citations)
        yield Status("generation", _("正在生成回答..."))

        request = answer_request(question=prepared.rewritten_query, selection=selection,
                                 history=prepared.history, kb=turn.kb, focus=turn.focus)
        answer_filter = AnswerFilter(
            valid_numbers={c.number for c in citations},
            asset_ids={asset.id for item in selection.items if item.result for asset in item.result.assets},
            link_hosts=turn.link_hosts,
        )
        # A sentence the answerer leaves uncited is cited to the source it rests on.
        citer = EvidenceCiter({item.number: item.text for item in selection.items},
                              min_support=rules.generation.attach_min_support)
        # Everything the answer needs is read; the evidence is stored on a fresh connection.
        release_connection()
        return PendingAnswer(
            turn=turn, answerer=answerer, request=request, max_tokens=rules.generation.max_tokens,
            temperature=rules.generation.temperature, answer_filter=answer_filter, citer=citer,
            prepared=prepared, selection=selection, citations=citations, evidence_confidence=evidence_confidence,
        )

    def conclude(self, pending: PendingAnswer) -> Iterator[Event]:
        """After the model's answer: the tails it needs, support and verification, confidence,
        then the answer stored with its evidence (stages 6–7)."""
        turn, prepared, selection = pending.turn, pending.prepared, pending.selection
        citations, answer_filter, rules = pending.citations, pending.answer_filter, turn.rules
        answer = "".join(turn.delivered)
        # A sentence resting on a source says something, whoever cited it.
        declined = is_declined(answer, cited=bool(answer_filter.cited_numbers or pending.citer.attached))
        if declined:
            # Both declines (no evidence, weak evidence) end by naming whom to ask.
            tail = contact_tail(turn.kb, answer)
            if tail:
                turn.delivered.append(tail)
                yield Delta(tail)
                answer += tail
        if not answer_filter.cited_numbers and not pending.citer.attached and not declined:
            # Titles are documents' and FAQs' own text: they go through the filter like the answer.
            tail = _filtered(
                reference_tail(citations, limit=rules.generation.references_on_missing_citations),
                AnswerFilter(valid_numbers=answer_filter.valid_numbers, asset_ids=set(),
                             link_hosts=turn.link_hosts),
            )
            if tail:
                turn.delivered.append(tail)
                yield Delta(tail)
                answer += tail

        with turn.stage("citation_check"):
            chunk_ids = {i for c in citations for i in (c.chunk_id, *c.context_chunk_ids) if i is not None}
            citations = attach_support(citations, answer=answer, chunk_texts=chunk_contents(chunk_ids=chunk_ids))
            verification = calculate_generation_confidence(
                answer=answer, context_numbers={c.number for c in citations},
                context_texts=[item.text for item in selection.items],
                removed_citations=answer_filter.removed_citations, blocked_images=answer_filter.blocked_images,
                declined=declined, question=prepared.rewritten_query,
            )
        features = answer_features(
            question_terms=selection.question_terms, answer=answer, question=prepared.rewritten_query,
            sources=[
                SourceEvidence(number=item.number, title=item.title, relevance=item.relevance.score,
                               meaning=item.result.semantic_relevance if item.result is not None else None)
                for item in selection.items
            ],
        )
        confidence = combine_answer_confidence(pending.evidence_confidence, verification, features=features,
                                               rules=rules.confidence)
        if declined:
            # A decline is the insufficient-context answer whoever wrote it: no sources shown with
            # it, its own hit type, the reason in the trace.
            turn.hit_type = HitType.INSUFFICIENT_CONTEXT
            turn.selection = replace(selection, insufficient_reason="answerer_declined")
            citations = ()
        turn.generation = GenerationReport(
            model=pending.answerer.name,
            removed_citations=tuple(answer_filter.removed_citations),
            blocked_images=answer_filter.blocked_images,
            links_shown_as_text=answer_filter.shown_links,
            declined=declined,
            attached_citations=tuple(pending.citer.attached),
        )
        yield self._finish(turn, answer=answer, intent=prepared.intent, citations=citations,
                           confidence=confidence)

    def _answerer_writes(self) -> bool:
        """Whether the answer will be written by a model (which judges the evidence itself).
        A model that cannot be built is no writer here; the answer stage reports it."""
        try:
            return self._chat_model().generative
        except (ProviderError, ImproperlyConfigured):
            return False

    def _clarification(self, turn: TurnState, selection: ContextSelection) -> Clarification | None:
        """Rule C's clarifying question: the question fits several items and none more than the
        others. Asked when the best evidence is about some of them (a price table, one model's
        sentence), since answering would be a guess; not when it names none of them (the
        management address, the same on every model), nor when nothing answers at all."""
        confirmation = turn.items
        if confirmation is None or not turn.focus.unsure:
            return None
        candidates = confirmation.clarify_candidates
        documents = [item for item in selection.items if item.kind == "chunk"]
        if len(candidates) < 2 or not documents:
            return None
        if not turn.focus.names_candidate(documents[0].text):
            return None
        mention = next((c.matched for c in candidates if c.matched), "")
        return Clarification(
            question=turn.question, mention=mention,
            choices=tuple(ClarifyChoice(item_id=c.item_id, name=c.name) for c in candidates),
        )

    def _single_answer(self, turn: TurnState, *, hit_type: HitType, answer: str, intent: IntentResult,
                       citations: tuple[Citation, ...], top_score: float, faq_ids: tuple[int, ...] = (),
                       clarify: Clarification | None = None):
        """Direct, FAQ and insufficient-context answers: fixed text, no model call."""
        prepared = turn.preparation
        evidence_confidence = calculate_evidence_confidence(
            hit_type=hit_type, retrieval_top_score=top_score, context_count=0,
            source_count=len(turn.selection.sources) if turn.selection else len(citations),
            intent_rule_score=intent.rule_score, intent_decision_score=intent.confidence,
            history_rewrite_used=prepared.history_rewrite_used if prepared else False,
        )
        yield self._evidence(turn, hit_type=hit_type, citations=citations)
        # A FAQ's answer is text staff (or an import) wrote: the same rules as a model's answer.
        answer = _filtered(answer, AnswerFilter(valid_numbers={c.number for c in citations}, asset_ids=set(),
                                                link_hosts=turn.link_hosts))
        for start in range(0, len(answer), DIRECT_DELTA_CHARS):
            piece = answer[start:start + DIRECT_DELTA_CHARS]
            turn.mark_first_token()
            turn.delivered.append(piece)
            yield Delta(piece)
        confidence = combine_answer_confidence(evidence_confidence, NOT_APPLICABLE)
        yield self._finish(turn, answer=answer, intent=intent, citations=citations, confidence=confidence,
                           faq_ids=faq_ids, clarify=clarify)

    # --- events and persistence -------------------------------------------------------------

    def _evidence(self, turn: TurnState, *, hit_type: HitType, citations: tuple[Citation, ...]) -> Evidence:
        turn.hit_type = hit_type
        return Evidence(
            citations=citations, retrieval_results=turn.documents.results if turn.documents else (),
            retrieval_trace=turn.trace_payload(), route=turn.route.route,
        )

    def _finish(self, turn: TurnState, *, answer: str, intent: IntentResult, citations: tuple[Citation, ...],
                confidence: AnswerConfidence, faq_ids: tuple[int, ...] = (),
                clarify: Clarification | None = None) -> Finished:
        # A client gone while the model sent its last (textless) chunk never saw the answer
        # end: the turn is cancelled, not stored complete with evidence.
        turn.check_cancelled()
        route, hit_type = turn.route.route, turn.hit_type
        with turn.stage("save_history"):
            trace = turn.trace_record(intent=intent, confidence=confidence)
            message = services.complete_turn(
                conversation=turn.conversation,
                answer=answer,
                evidence=services.EvidenceRecord(
                    route=str(route), hit_type=str(hit_type), intent=intent.as_dict(),
                    rewritten_query=turn.retrieval_question,
                    citations=[c.as_dict() for c in citations],
                    retrieval_results=[r.as_dict() for r in turn.documents.results] if turn.documents else [],
                    retrieval_trace=trace.details,
                    answer_confidence=confidence.as_dict(),
                ),
                trace=trace,
                user=turn.requester.user,
                faq_ids=faq_ids,
            )
        turn.stored = True
        turn.end_span(trace, answer=answer)
        return Finished(
            TurnResult(
                trace_id=turn.trace_id, conversation_id=turn.conversation.pk,
                user_message_id=turn.user_message_id, assistant_message_id=message.pk, answer=answer,
                route=route, hit_type=hit_type, intent=intent, citations=citations,
                answer_confidence=confidence, retrieval=turn.end_payload(), kb_version=turn.kb_version,
                clarify=clarify,
            )
        )

    def _store_failure(self, turn: TurnState, *, code: str, error: BaseException | None, cancelled: bool) -> None:
        trace = None
        try:
            trace = turn.trace_record(intent=None, confidence=None, error=error, error_code=code)
            services.fail_turn(
                conversation=turn.conversation, delivered_text="".join(turn.delivered), trace=trace,
                user=turn.requester.user, cancelled=cancelled,
            )
        except Exception:  # noqa: BLE001 — never mask the original failure with a bookkeeping one
            logger.exception("could not store the failed turn %s", turn.trace_id)
        turn.end_span(trace, error=error)

    # --- collaborators ----------------------------------------------------------------------

    def _conversation(self, query: ChatQuery, requester: Requester, kb: KnowledgeBase) -> Conversation | None:
        if query.conversation_id is not None:
            conversation = access_conversation(requester=requester, conversation_id=query.conversation_id)
        else:
            conversation = selectors.conversation_by_client_id(
                requester=requester, kb_id=kb.pk, client_id=query.client_id
            )
        if conversation is not None and conversation.knowledge_base_id != kb.pk:
            raise ChatError(_("该会话属于另一个知识库。"), code="conversation_kb_mismatch", http_status=400)
        return conversation

    def _also_kbs(self, query: ChatQuery, requester: Requester, kb: KnowledgeBase) -> tuple[KnowledgeBase, ...]:
        """The further knowledge bases the question reads, each checked like the first; one the
        requester may not read fails the whole question exactly as a missing one would."""
        slugs = tuple(slug for slug in dict.fromkeys(query.also_knowledge_base_ids) if slug != kb.slug)
        most = settings.RAG_MAX_KNOWLEDGE_BASES_PER_QUESTION
        if len(slugs) + 1 > most:
            raise ChatError(
                _("一次提问最多可同时检索 %(n)s 个知识库。") % {"n": most},
                code="too_many_knowledge_bases", http_status=400,
            )
        return access_knowledge_bases(user=requester.user, kb_ids=slugs) if slugs else ()

    def _model(self) -> ChatModel:
        try:
            return self._chat_model()
        except ImproperlyConfigured as exc:
            logger.error("chat model is not configured: %s", exc)
            raise ChatError(_("问答模型未配置或不可用，请联系管理员。"), code="chat_model_unavailable",
                            http_status=503) from exc

    def _item_extractor(self, rules: Rules) -> ModelItemExtractor | None:
        """The chat model, where it can write and the rules file asks for it."""
        if not rules.items.ask_model:
            return None
        try:
            model = self._chat_model()
        except ImproperlyConfigured:
            return None
        return ModelItemExtractor(model) if model.generative else None

    def _follow_up_rewriter(self, rules: Rules) -> FollowUpRewriter:
        """The chat model where it can write; the deterministic rule otherwise."""
        try:
            model = self._chat_model()
        except ImproperlyConfigured:
            return RuleFollowUpRewriter(rules)
        return ModelFollowUpRewriter(model) if model.generative else RuleFollowUpRewriter(rules)


@dataclass(frozen=True)
class PendingAnswer:
    """A turn whose evidence is out and whose model is about to answer: everything stage 6 and
    `conclude` need, read before the connection was given back."""

    turn: TurnState
    answerer: Answerer
    request: AnswerRequest
    max_tokens: int
    temperature: float
    answer_filter: AnswerFilter
    citer: EvidenceCiter
    prepared: Preparation
    selection: ContextSelection
    citations: tuple[Citation, ...]
    evidence_confidence: EvidenceConfidence


def _replacing(error: BaseException, cause: BaseException | None) -> BaseException:
    """`error` as `raise error from cause` would raise it (`from None` for no cause)."""
    error.__cause__ = cause
    error.__suppress_context__ = True
    return error


def _filtered(text: str, answer_filter: AnswerFilter) -> str:
    return answer_filter.feed(text) + answer_filter.flush()


def _retrieval_request(turn: TurnState, prepared: Preparation) -> RetrievalRequest:
    plan = prepared.plan
    return RetrievalRequest(
        kb_id=turn.kb.pk,
        also_kb_ids=turn.also_kb_ids,
        question=prepared.rewritten_query,
        top_k=plan.doc_top_k,
        mode=plan.mode,
        candidate_k=plan.candidate_k,
        enable_query_rewrite=plan.enable_query_rewrite,
        enable_rerank=plan.enable_rerank,
        enable_parent_expansion=plan.enable_parent_expansion,
        enable_hyde=plan.enable_hyde,
        dynamic_top_k=plan.dynamic_top_k,
        document_ids=plan.document_ids,
        context_variants=tuple(prepared.variants[1:]),
        filters=plan.filters,
        item_ids=turn.focus.item_ids,
        # The asked knowledge base's switch decides, as its other settings do for the scope.
        enable_web_search=turn.kb.web_search_enabled and web_search_configured(),
    )
