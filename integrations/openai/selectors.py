"""The knowledge bases an OpenAI client sees as models: the ones the caller may read."""

from __future__ import annotations

from django.db.models import QuerySet

from knowledge.access import access_knowledge_base, readable_knowledge_bases
from knowledge.models import KnowledgeBase


def readable_models(*, user) -> QuerySet[KnowledgeBase]:
    return readable_knowledge_bases(user).order_by("slug").only("slug", "created_at")


def model(*, user, model_id: str) -> KnowledgeBase:
    """The knowledge base `model_id` names, or NotFound: one the caller may not read is
    missing, with the same answer (`access_knowledge_base`)."""
    return access_knowledge_base(user=user, kb_id=model_id)
