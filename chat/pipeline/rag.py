"""RAGService: one question through seed 003's stages 0–7, as a stream of events.

    stage 0  context          validate, access, conversation, trace id, stored question
    stage 1  routing          direct answer | FAQ exact | retrieval
    stage 2  preparation      history, follow-up rewrite, intent, plan, variants
    stage 3  FAQ retrieval    threshold direct answer, fast-path candidates reused
    stage 4  documents        RetrievalService (the same one the API and the hit test use)
    stage 5  context          relevance floor, budgets, numbering, citations | insufficient
    stage 6  generation       streamed through citation enforcement, verified, confidence
    stage 7  persistence      answer + evidence + trace in one transaction

Streaming and non-streaming callers share this one generator (seed 000 §7): everything up to
the `Evidence` event is preparation and raises ordinary errors; after it the answer streams.
Closing the generator or setting `cancel` stops it: retrieval and the model call are abandoned
and the turn is stored as cancelled.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.utils.translation import gettext as _

from engines.ports import ChatMessage, ChatModel, ProviderError
from engines.providers import get_chat_model
from knowledge.access import access_knowledge_base
from knowledge.models import KnowledgeBase
from knowledge.selectors import chunk_contents
from ragsite.errors import DomainError
from retrieval.contracts import (
    RetrievalCancelled,
    RetrievalError,
    RetrievalRequest,
    RetrievalResponse,
)
from retrieval.factory import build_faq_retrieval, build_retrieval_service
from retrieval.faqs import FaqRetrieval
from retrieval.service import RetrievalService

from .. import selectors, services
from ..access import access_conversation
from ..contracts import (
    ChatError,
    ChatQuery,
    Citation,
    GenerationFailed,
    IntentResult,
    Requester,
    TurnCancelled,
    TurnResult,
)
from ..models import Conversation
from .citations import attach_support, build_citations, faq_citation, reference_tail
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
    insufficient_answer,
    select_context,
    system_prompt,
    user_prompt,
)
from .events import Delta, Event, Evidence, Finished, Started, Status
from .faq import search_faq
from .generation import AnswerFilter, filtered_stream, is_declined
from .preparation import (
    FollowUpRewriter,
    ModelFollowUpRewriter,
    Preparation,
    RuleFollowUpRewriter,
    prepare_retrieval,
)
from .routing import RouteDecision, decide_route
from .rules import Rules, load_rules, normalise_question
from .runtime import QueryContext

logger = logging.getLogger(__name__)

GENERATION_FAILED = "回答生成失败，请稍后重试。"
DIRECT_DELTA_CHARS = 24


class RAGService:
    def __init__(
        self,
        *,
        retrieval: Callable[[KnowledgeBase], RetrievalService] = build_retrieval_service,
        faqs: Callable[[KnowledgeBase], FaqRetrieval] = build_faq_retrieval,
        chat_model: Callable[[], ChatModel] = get_chat_model,
        rules: Callable[[], Rules] = load_rules,
    ) -> None:
        self._retrieval = retrieval
        self._faqs = faqs
        self._chat_model = chat_model
        self._rules = rules

    # --- entry point ------------------------------------------------------------------------

    def run(
        self, *, query: ChatQuery, requester: Requester, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        # Stage 0: validate and check access before anything is stored.
        question = normalise_question(query.question)
        if not question:
            raise ChatError(_("问题不能为空。"), code="question_empty", http_status=400)
        max_chars = settings.RAG_MAX_QUESTION_CHARS
        if len(question) > max_chars:
            raise ChatError(
                _("问题过长（最多 %(n)s 个字符）。") % {"n": max_chars},
                code="question_too_long", http_status=400,
            )
        kb = access_knowledge_base(user=requester.user, kb_id=query.knowledge_base_id)
        conversation = self._conversation(query, requester, kb)
        rules = self._rules()

        ctx = QueryContext(
            query=query, requester=requester, kb=kb, question=question,
            cancel=cancel or threading.Event(),
            kb_version=kb.active_version.number if kb.active_version_id else None,
        )
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
        ctx.conversation_id, ctx.user_message_id = conversation.pk, user_message.pk
        turn = _Turn(ctx=ctx, conversation=conversation, history=history)
        yield Started(
            trace_id=ctx.trace_id, conversation_id=conversation.pk, user_message_id=user_message.pk,
            kb_id=kb.slug, kb_name=kb.name, kb_version=ctx.kb_version, data_scope=ctx.data_scope,
        )
        try:
            # Built inside the turn: a knowledge base the deployment cannot serve is a traced failure.
            retrieval = self._retrieval(kb)
            faqs = self._faqs(kb)
            yield from self._stages(turn, rules=rules, retrieval=retrieval, faqs=faqs)
        except GeneratorExit:
            # Gone after the answer was stored (before reading the end of the stream): the
            # turn is complete as it is; there is no failure to record.
            if not turn.stored:
                self._store_failure(turn, code="client_disconnected", error=None, cancelled=True)
            raise
        except (TurnCancelled, RetrievalCancelled):
            if not turn.stored:
                self._store_failure(turn, code="client_disconnected", error=None, cancelled=True)
            raise TurnCancelled("the client went away") from None
        except (RetrievalError, DomainError) as exc:
            self._store_failure(turn, code=exc.code, error=exc, cancelled=False)
            raise
        except ProviderError as exc:
            self._store_failure(turn, code=exc.code, error=exc, cancelled=False)
            raise GenerationFailed(_(GENERATION_FAILED)) from exc
        except DatabaseError as exc:
            # e.g. the connection dropped while the answer and its evidence were committed: the
            # transaction rolled back whole; the failure is stored on a new connection.
            logger.error("turn %s: database error: %s", ctx.trace_id, exc)
            self._store_failure(turn, code="storage_unavailable", error=exc, cancelled=False)
            raise ChatError(_("数据库暂时不可用，回答未能保存，请稍后重试。"), code="storage_unavailable",
                            http_status=503) from exc
        except Exception as exc:
            logger.exception("turn %s failed", ctx.trace_id)
            self._store_failure(turn, code="internal_error", error=exc, cancelled=False)
            raise GenerationFailed(_(GENERATION_FAILED)) from exc

    def answer(self, *, query: ChatQuery, requester: Requester) -> TurnResult:
        """The same turn, consumed to the end (the JSON API)."""
        result = None
        for event in self.run(query=query, requester=requester):
            if isinstance(event, Finished):
                result = event.result
        assert result is not None
        return result

    # --- stages 1–7 -------------------------------------------------------------------------

    def _stages(self, turn: _Turn, *, rules: Rules, retrieval: RetrievalService, faqs: FaqRetrieval):
        ctx = turn.ctx
        yield Status("route", _("正在进行查询路由..."))
        with ctx.stage("route"):
            route = decide_route(ctx, rules=rules, faqs=faqs)
        turn.info["route"] = route.as_dict()
        if route.route == "direct_answer":
            yield from self._single_answer(turn, route=route, hit_type="direct_answer", answer=route.answer,
                                           intent=route.intent, citations=(), top_score=0.0)
            return
        if route.route == "faq_exact":
            yield from self._single_answer(turn, route=route, hit_type="faq_exact", answer=route.answer,
                                           intent=route.intent, citations=(faq_citation(route.faq_hit),),
                                           top_score=1.0, faq_ids=(route.faq_hit.faq_id,))
            return

        yield Status("prepare", _("正在识别问题意图..."))
        with ctx.stage("prepare"):
            prepared, degradations = prepare_retrieval(
                question=ctx.question, history=turn.history, options=ctx.query.options, rules=rules,
                rewriter=self._follow_up_rewriter(rules),
            )
        ctx.degradations.extend(degradations)
        turn.prepared = prepared
        turn.info["preparation"] = prepared.as_dict()
        ctx.check_cancelled()

        yield Status("faq_search", _("正在检索业务 FAQ 知识库..."))
        with ctx.stage("faq_search"):
            faq_stage = search_faq(ctx, prepared=prepared, route=route, faqs=faqs)
        turn.info["faq"] = faq_stage.as_dict()
        if faq_stage.direct is not None:
            hit = faq_stage.direct
            hit_type = "faq_exact" if faq_stage.direct_kind == "exact" else "faq_direct"
            yield from self._single_answer(turn, route=route, hit_type=hit_type, answer=hit.answer,
                                           intent=prepared.intent, citations=(faq_citation(hit),),
                                           top_score=hit.score, faq_ids=(hit.faq_id,))
            return
        ctx.check_cancelled()

        yield Status("doc_search", _("正在匹配相关业务资料..."))
        with ctx.stage("doc_search"):
            documents = retrieval.retrieve(_retrieval_request(ctx, prepared), cancel=ctx.cancel)
        ctx.add_cache(documents.trace.cache.as_dict())
        ctx.degradations.extend(documents.trace.degradations)
        turn.documents = documents
        turn.info["documents"] = documents.trace.as_dict()
        ctx.check_cancelled()

        with ctx.stage("context_build"):
            selection = select_context(
                question=prepared.rewritten_query, faq_hits=faq_stage.response.hits,
                doc_results=documents.results, plan=prepared.plan, rules=rules.context,
                empty_reason=documents.trace.empty_reason,
            )
            citations = build_citations(selection.items, question=prepared.rewritten_query)
        turn.selection = selection
        turn.info["context"] = selection.as_dict()
        if not selection.items:
            yield from self._single_answer(turn, route=route, hit_type="insufficient_context",
                                           answer=insufficient_answer(ctx.kb), intent=prepared.intent,
                                           citations=(), top_score=selection.top_score)
            return
        model = self._model()
        turn.model_name = model.name
        yield from self._generate(turn, route=route, prepared=prepared, selection=selection,
                                  citations=citations, model=model, rules=rules)

    def _generate(self, turn: _Turn, *, route, prepared: Preparation, selection: ContextSelection,
                  citations: tuple[Citation, ...], model: ChatModel, rules: Rules):
        ctx = turn.ctx
        evidence_confidence = calculate_evidence_confidence(
            hit_type="rag", retrieval_top_score=selection.top_score, context_count=len(selection.items),
            source_count=len(selection.sources), intent_rule_score=prepared.intent.rule_score,
            intent_decision_score=prepared.intent.confidence, history_rewrite_used=prepared.history_rewrite_used,
        )
        yield self._evidence(turn, route=route, hit_type="rag", citations=citations)
        yield Status("generation", _("正在生成回答..."))

        messages = [
            ChatMessage("system", system_prompt(ctx.kb)),
            ChatMessage("user", user_prompt(question=prepared.rewritten_query, items=selection.items,
                                            history=prepared.history)),
        ]
        answer_filter = AnswerFilter(
            valid_numbers={c.number for c in citations},
            asset_ids={asset.id for item in selection.items if item.result for asset in item.result.assets},
            link_hosts=ctx.kb.link_hosts,
        )
        with ctx.stage("llm_generation"):
            stream = model.stream(messages, max_tokens=rules.generation.max_tokens,
                                  temperature=rules.generation.temperature)
            try:
                for piece in filtered_stream(stream, answer_filter):
                    ctx.check_cancelled()
                    ctx.mark_first_token()
                    turn.delivered.append(piece)
                    yield Delta(piece)
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()
        answer = "".join(turn.delivered)
        declined = is_declined(answer)
        if declined:
            # Both declines (no evidence, weak evidence) end by naming whom to ask.
            tail = contact_tail(ctx.kb, answer)
            if tail:
                turn.delivered.append(tail)
                yield Delta(tail)
                answer += tail
        if not answer_filter.cited_numbers and not declined:
            # Titles are documents' and FAQs' own text: they go through the filter like the answer.
            tail = _filtered(
                reference_tail(citations, limit=rules.generation.references_on_missing_citations),
                AnswerFilter(valid_numbers=answer_filter.valid_numbers, asset_ids=set(), link_hosts=ctx.kb.link_hosts),
            )
            if tail:
                turn.delivered.append(tail)
                yield Delta(tail)
                answer += tail

        with ctx.stage("citation_check"):
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
        confidence = combine_answer_confidence(evidence_confidence, verification, features=features,
                                               rules=rules.confidence)
        turn.info["generation"] = {
            "model": model.name,
            "removed_citations": list(answer_filter.removed_citations),
            "blocked_images": answer_filter.blocked_images,
            "links_shown_as_text": answer_filter.shown_links,
            "declined": declined,
        }
        yield self._finish(turn, route=route, hit_type="rag", answer=answer, intent=prepared.intent,
                           citations=citations, confidence=confidence)

    def _single_answer(self, turn: _Turn, *, route: RouteDecision, hit_type: str, answer: str,
                       intent: IntentResult, citations: tuple[Citation, ...], top_score: float,
                       faq_ids: tuple[int, ...] = ()):
        """Direct, FAQ and insufficient-context answers: fixed text, no model call."""
        prepared = turn.prepared
        evidence_confidence = calculate_evidence_confidence(
            hit_type=hit_type, retrieval_top_score=top_score, context_count=0,
            source_count=len(turn.selection.sources) if turn.selection else len(citations),
            intent_rule_score=intent.rule_score, intent_decision_score=intent.confidence,
            history_rewrite_used=prepared.history_rewrite_used if prepared else False,
        )
        yield self._evidence(turn, route=route, hit_type=hit_type, citations=citations)
        # A FAQ's answer is text staff (or an import) wrote: the same rules as a model's answer.
        answer = _filtered(answer, AnswerFilter(valid_numbers={c.number for c in citations}, asset_ids=set(),
                                                link_hosts=turn.ctx.kb.link_hosts))
        for start in range(0, len(answer), DIRECT_DELTA_CHARS):
            piece = answer[start:start + DIRECT_DELTA_CHARS]
            turn.ctx.mark_first_token()
            turn.delivered.append(piece)
            yield Delta(piece)
        confidence = combine_answer_confidence(evidence_confidence, NOT_APPLICABLE)
        yield self._finish(turn, route=route, hit_type=hit_type, answer=answer, intent=intent,
                           citations=citations, confidence=confidence, faq_ids=faq_ids)

    # --- events and persistence -------------------------------------------------------------

    def _evidence(self, turn: _Turn, *, route: RouteDecision, hit_type: str, citations) -> Evidence:
        turn.route = route
        turn.hit_type = hit_type
        results = tuple(r.as_dict() for r in turn.documents.results) if turn.documents else ()
        return Evidence(
            citations=citations, retrieval_results=results, retrieval_trace=turn.trace_payload(),
            route=route.route,
        )

    def _finish(self, turn: _Turn, *, route, hit_type, answer, intent, citations, confidence,
                faq_ids: tuple[int, ...] = ()) -> Finished:
        ctx = turn.ctx
        # A client gone while the model sent its last (textless) chunk never saw the answer
        # end: the turn is cancelled, not stored complete with evidence.
        ctx.check_cancelled()
        with ctx.stage("save_history"):
            trace = turn.trace_record(route=route.route, intent=intent, hit_type=hit_type, confidence=confidence)
            message = services.complete_turn(
                conversation=turn.conversation,
                answer=answer,
                evidence=services.EvidenceRecord(
                    route=route.route, hit_type=hit_type, intent=intent.as_dict(),
                    rewritten_query=turn.prepared.rewritten_query if turn.prepared else ctx.question,
                    citations=[c.as_dict() for c in citations],
                    retrieval_results=[r.as_dict() for r in turn.documents.results] if turn.documents else [],
                    retrieval_trace=trace.details,
                    answer_confidence=confidence,
                ),
                trace=trace,
                user=ctx.requester.user,
                faq_ids=faq_ids,
            )
        turn.stored = True
        return Finished(
            TurnResult(
                trace_id=ctx.trace_id, conversation_id=turn.conversation.pk,
                user_message_id=ctx.user_message_id, assistant_message_id=message.pk, answer=answer,
                route=route.route, hit_type=hit_type, intent=intent, citations=citations,
                answer_confidence=confidence, retrieval=turn.end_payload(), kb_version=ctx.kb_version,
            )
        )

    def _store_failure(self, turn: _Turn, *, code: str, error: BaseException | None, cancelled: bool) -> None:
        try:
            trace = turn.trace_record(
                route=turn.route.route if turn.route else "", intent=None, hit_type=turn.hit_type,
                confidence=None, error=error, error_code=code,
            )
            services.fail_turn(
                conversation=turn.conversation, delivered_text="".join(turn.delivered), trace=trace,
                user=turn.ctx.requester.user, cancelled=cancelled,
            )
        except Exception:  # noqa: BLE001 — never mask the original failure with a bookkeeping one
            logger.exception("could not store the failed turn %s", turn.ctx.trace_id)

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

    def _model(self) -> ChatModel:
        try:
            return self._chat_model()
        except ImproperlyConfigured as exc:
            logger.error("chat model is not configured: %s", exc)
            raise ChatError(_("问答模型未配置或不可用，请联系管理员。"), code="chat_model_unavailable",
                            http_status=503) from exc

    def _follow_up_rewriter(self, rules: Rules) -> FollowUpRewriter:
        """The chat model where it can write; the deterministic rule otherwise."""
        try:
            model = self._chat_model()
        except ImproperlyConfigured:
            return RuleFollowUpRewriter(rules)
        return ModelFollowUpRewriter(model) if model.generative else RuleFollowUpRewriter(rules)


def _filtered(text: str, answer_filter: AnswerFilter) -> str:
    return answer_filter.feed(text) + answer_filter.flush()


def _retrieval_request(ctx: QueryContext, prepared: Preparation) -> RetrievalRequest:
    plan = prepared.plan
    return RetrievalRequest(
        kb_id=ctx.kb.pk,
        question=prepared.rewritten_query,
        top_k=plan.doc_top_k,
        mode=plan.mode,
        candidate_k=plan.candidate_k,
        enable_query_rewrite=plan.enable_query_rewrite,
        enable_rerank=plan.enable_rerank,
        enable_parent_expansion=plan.enable_parent_expansion,
        document_ids=plan.document_ids,
        context_variants=tuple(prepared.variants[1:]),
    )


class _Turn:
    """What one run has gathered so far, for the trace, the end payload and failures."""

    def __init__(self, *, ctx: QueryContext, conversation: Conversation, history) -> None:
        self.ctx = ctx
        self.conversation = conversation
        self.history = history
        self.info: dict[str, Any] = {}
        self.prepared: Preparation | None = None
        self.documents: RetrievalResponse | None = None
        self.selection: ContextSelection | None = None
        self.route: RouteDecision | None = None
        self.hit_type = ""
        self.model_name = ""
        self.delivered: list[str] = []
        self.stored = False  # the answer and its evidence are committed: nothing left to fail

    def query_variants(self) -> list[str]:
        if self.documents:
            return list(self.documents.trace.query_variants)
        return list(self.prepared.variants) if self.prepared else [self.ctx.question]

    def trace_payload(self) -> dict[str, Any]:
        ctx = self.ctx
        prepared = self.prepared
        return {
            "trace_id": str(ctx.trace_id),
            **self.info,
            "query_variants": self.query_variants(),
            "plan": prepared.plan.as_dict() if prepared else None,
            "insufficient_context_reason": self.selection.insufficient_reason if self.selection else "",
            "cache": ctx.cache_block(),
            "degradations": list(dict.fromkeys(ctx.degradations)),
            **ctx.timings_block(),
        }

    def end_payload(self) -> dict[str, Any]:
        timings = {t["stage"]: t["elapsed_ms"] for t in self.ctx.stage_timings_ms}
        prepared = self.prepared
        return {
            "plan": prepared.plan.as_dict() if prepared else None,
            "query_variants": self.query_variants(),
            "rewritten_query": prepared.rewritten_query if prepared else self.ctx.question,
            "history_rewrite_used": prepared.history_rewrite_used if prepared else False,
            "faq_elapsed_ms": timings.get("faq_search"),
            "doc_elapsed_ms": timings.get("doc_search"),
            "sources": list(self.selection.sources) if self.selection else [],
            "insufficient_context_reason": self.selection.insufficient_reason if self.selection else "",
            "cache": self.ctx.cache_block(),
            "degradations": list(dict.fromkeys(self.ctx.degradations)),
            **self.ctx.timings_block(),
        }

    def trace_record(self, *, route: str, intent: IntentResult | None, hit_type: str, confidence,
                     error: BaseException | None = None, error_code: str = "") -> services.TraceRecord:
        ctx = self.ctx
        details = self.trace_payload()
        return services.TraceRecord(
            trace_id=ctx.trace_id,
            kb_version=ctx.kb_version,
            question=ctx.question,
            rewritten_query=self.prepared.rewritten_query if self.prepared else "",
            route=route,
            intent=intent.intent if intent else "",
            hit_type=hit_type,
            confidence_score=confidence["score"] if confidence else None,
            confidence_level=confidence["level"] if confidence else "",
            stage_timings=list(ctx.stage_timings_ms),
            first_token_ms=ctx.first_token_ms,
            total_ms=ctx.elapsed_ms(),
            cache=ctx.cache_block(),
            degradations=list(dict.fromkeys(ctx.degradations)),
            insufficient_reason=self.selection.insufficient_reason if self.selection else "",
            model_name=self.model_name,
            error_class=type(error).__name__ if error is not None else "",
            error_code=error_code,
            details=details,
        )
