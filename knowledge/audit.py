"""One audit row per write a service makes to a knowledge base, in the write's transaction: a
rolled-back write leaves no entry, a committed one always has its entry."""

from __future__ import annotations

from knowledge.actors import Actor, user_or_none
from knowledge.models import AuditAction, AuditEntry, KnowledgeBase

def record(*, kb: KnowledgeBase, actor: Actor, action: AuditAction, target: str = "") -> AuditEntry:
    """`actor` None: a command or background task acted (the entry names nobody)."""
    return AuditEntry.objects.create(
        knowledge_base=kb, knowledge_base_slug=kb.slug, action=action, target=target[:300], actor=user_or_none(actor),
    )

