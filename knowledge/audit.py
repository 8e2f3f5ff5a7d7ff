"""One audit row per write a service makes to a knowledge base, in the write's transaction: a
rolled-back write leaves no entry, a committed one always has its entry."""

from __future__ import annotations

from django.utils.translation import gettext_lazy

from knowledge.actors import Actor, user_or_none
from knowledge.models import AuditAction, AuditEntry, KnowledgeBase

# Writes logged under a code `AuditAction` does not list yet: its choices live in the model,
# which changes only together with a migration. The admin reads their words from here until the
# code joins the choices.
DOCUMENT_ATTRIBUTES_UPDATED = "document_attributes_updated"
PENDING_ACTIONS = {DOCUMENT_ATTRIBUTES_UPDATED: gettext_lazy("修改文档元数据")}


def record(*, kb: KnowledgeBase, actor: Actor, action: AuditAction | str, target: str = "") -> AuditEntry:
    """`actor` None: a command or background task acted (the entry names nobody)."""
    return AuditEntry.objects.create(
        knowledge_base=kb, knowledge_base_slug=kb.slug, action=action, target=target[:300], actor=user_or_none(actor),
    )


def action_label(entry: AuditEntry) -> str:
    """The entry's action in words, for the codes of `PENDING_ACTIONS` too."""
    if entry.action in PENDING_ACTIONS:
        return str(PENDING_ACTIONS[entry.action])
    return entry.get_action_display()
