"""The work of the MCP tools, synchronous: each call runs in a worker of the chat-turn pool
(`integrations.mcp.server`), where every query of it runs and whose connection goes back when
it returns, so no database connection is held across an await.

Each tool goes through what the product's own API goes through, in the same order:

- `list_knowledge_bases`: `readable_knowledge_bases`, as `GET /api/knowledge-bases/`;
- `search`: the retrieval throttles, `RetrievalRequestInput` (its limits and the anonymous
  caller's), then `retrieve_for_user` (access, the active version's READY documents, the cache
  under the knowledge base's epoch), as `POST /api/retrieval/search` and the admin hit test;
- `ask`: `admit_question` (the chat throttles, validation, a concurrent-answer slot held until
  the turn ends) and `RAGService().answer`, as `POST /api/chat`: the turn is stored with its
  evidence and trace like any other.

A refusal is `ToolRefused` with the API's error body (`code`, `detail` in the caller's
language and the error's own fields), or the domain or retrieval error itself, which the server
answers with the body the API gives it (`ragsite.api.error_payload`): a knowledge base the
caller may not read is refused with the very words of a missing one, because access says so,
not this module.
"""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from chat.admission import Refused, admit_question
from chat.contracts import Citation, TurnResult
from chat.pipeline.citations import readable_markers
from chat.pipeline.rag import RAGService
from knowledge.access import readable_knowledge_bases
from knowledge.locators import locator_label
from ragsite.throttles import RETRIEVAL_THROTTLES, throttle_wait, throttled_body
from retrieval.contracts import RetrievalResponse
from retrieval.factory import retrieve_for_user
from retrieval.serializers import RetrievalRequestInput

from .contracts import (
    Answer,
    AnswerCitation,
    AnswerConfidenceInfo,
    KnowledgeBaseInfo,
    KnowledgeBaseList,
    SearchHit,
    SearchResults,
)


# Results per search: what a model's context can use; the API allows more (50).
MAX_TOP_K = 20
# Knowledge bases per listing: a deployment with more is asked by slug.
MAX_LISTED = 200


class ToolRefused(Exception):
    """A call the API would refuse: `body` is the API's error body for it."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body.get("detail", ""))
        self.body = body


def list_knowledge_bases(*, user) -> KnowledgeBaseList:
    rows = list(readable_knowledge_bases(user).select_related("active_version").order_by("name", "id")[:MAX_LISTED + 1])
    return KnowledgeBaseList(
        knowledge_bases=[
            KnowledgeBaseInfo(
                slug=kb.slug, name=kb.name, description=kb.description,
                active_version=kb.active_version.number if kb.active_version_id else None,
            )
            for kb in rows[:MAX_LISTED]
        ],
        truncated=len(rows) > MAX_LISTED,
    )


def search(*, caller, kb: str, query: str, top_k: int, filters: list[dict] | None, base_url: str) -> SearchResults:
    """`caller`: request-like (`user`, `META`) for the throttles."""
    wait = throttle_wait(caller, RETRIEVAL_THROTTLES)
    if wait is not None:
        raise ToolRefused(throttled_body(wait))
    body: dict[str, Any] = {"knowledge_base_id": kb, "question": query, "top_k": top_k}
    if filters:
        body["filters"] = filters
    options = _validated(RetrievalRequestInput(data=body, context={"user": caller.user}))
    response = retrieve_for_user(user=caller.user, **options)
    return _search_results(response, kb=kb, query=query, base_url=base_url)


def ask(*, caller, kb: str, question: str, conversation_id: str | None, base_url: str) -> Answer:
    body: dict[str, Any] = {"knowledge_base_id": kb, "question": question}
    if conversation_id:
        body["conversation_id"] = conversation_id
    # No session: an anonymous caller's turn is stored like any other but belongs to nobody
    # who could read it back (MCP clients keep no cookies); signed-in callers own theirs.
    admission = admit_question(caller=caller, body=body, session=None)
    if isinstance(admission, Refused):
        raise ToolRefused(admission.body)
    with admission.slot.held():
        result = RAGService().answer(query=admission.query, requester=admission.requester)
    return _answer(result, kb=kb, base_url=base_url)


def _validated(serializer: serializers.Serializer) -> dict[str, Any]:
    """The serializer's data; its field errors as the API's 400 body. (Its domain errors — a
    bad filter, an option an anonymous caller may not ask for — propagate with their own.)"""
    if not serializer.is_valid():
        raise ToolRefused({"code": "invalid_request", "detail": _errors_text(serializer.errors), "errors": serializer.errors})
    return serializer.validated_data


def _errors_text(errors, prefix: str = "") -> str:
    """DRF's field errors in one line: `top_k: 请确保该值小于或等于 20。`"""
    if isinstance(errors, dict):
        return "；".join(_errors_text(value, f"{prefix}{key}." if prefix else f"{key}") for key, value in errors.items())
    if isinstance(errors, list):
        return "；".join(
            f"{prefix}: {item}" if not isinstance(item, (dict, list)) else _errors_text(item, prefix) for item in errors
        )
    return f"{prefix}: {errors}"


def _absolute(base_url: str, path: str | None) -> str | None:
    return f"{base_url}{path}" if path else None


def _search_results(response: RetrievalResponse, *, kb: str, query: str, base_url: str) -> SearchResults:
    return SearchResults(
        knowledge_base=kb,
        query=query,
        results=[
            SearchHit(
                rank=rank, chunk_id=result.chunk_id, document_id=result.document_id,
                document_title=result.document_title, locator=dict(result.locator),
                locator_label=locator_label(result.locator), heading_path=list(result.heading_path),
                excerpt=result.matched_content, score=result.score, relevance=result.relevance,
                preview_url=_absolute(base_url, result.preview_url),
            )
            for rank, result in enumerate(response.results, start=1)
        ],
        empty_reason=(response.trace.empty_reason or None) if not response.results else None,
    )


def _citation(citation: Citation, *, base_url: str) -> AnswerCitation:
    return AnswerCitation(
        number=citation.number, kind=citation.kind, title=citation.title,
        locator_label=citation.locator_label, excerpt=citation.text, score=citation.score,
        relevance=citation.relevance, cited=citation.cited, chunk_id=citation.chunk_id,
        document_id=citation.document_id, faq_id=citation.faq_id, knowledge_base=citation.knowledge_base,
        preview_url=_absolute(base_url, citation.preview_url), url=citation.url,
    )


def _answer(result: TurnResult, *, kb: str, base_url: str) -> Answer:
    confidence = result.answer_confidence
    return Answer(
        answer=readable_markers(result.answer),
        citations=[_citation(c, base_url=base_url) for c in result.citations],
        confidence=AnswerConfidenceInfo(score=confidence.score, level=str(confidence.level), label=confidence.label),
        hit_type=str(result.hit_type),
        knowledge_base=kb,
        kb_version=result.kb_version,
        conversation_id=str(result.conversation_id),
        message_id=result.assistant_message_id,
        trace_id=str(result.trace_id),
    )


