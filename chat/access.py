"""Permission-checked fetches of chat data: a conversation is its owner's alone."""

from __future__ import annotations

import uuid

from django.contrib.auth.models import AnonymousUser
from django.utils.translation import gettext as _

from ragsite.errors import NotFound

from .contracts import Requester
from .models import Conversation
from .selectors import readable_conversations


def requester_of(*, user, session, claim_session: bool) -> Requester:
    """Who asks: a signed-in user, or an anonymous reader identified by their session.

    Asking a question (`claim_session`) gives an anonymous reader a session if they have none,
    so their conversation is theirs to continue; reading never creates one.
    """
    if user is not None and user.is_authenticated:
        return Requester(user=user)
    key = session.session_key if session is not None else ""
    if not key and claim_session and session is not None:
        session["chat"] = True  # modified: the HTTP middleware sends the cookie back
        session.save()
        key = session.session_key
    return Requester(user=AnonymousUser(), session_key=key or "")


def access_conversation(*, requester: Requester, conversation_id: uuid.UUID | str) -> Conversation:
    """The requester's own conversation on a knowledge base they may still read, or NotFound
    (another user's conversation is reported as missing, not forbidden)."""
    try:
        key = uuid.UUID(str(conversation_id))
    except ValueError:
        key = None
    # One lookup through what the requester may read: another user's conversation, or one on a
    # knowledge base they lost, costs and answers the same as a missing one.
    conversation = (
        readable_conversations(requester=requester).select_related("knowledge_base").filter(pk=key).first()
        if key is not None else None
    )
    if conversation is None:
        raise NotFound(_("会话 %(id)s 不存在或无权访问。") % {"id": conversation_id}, code="conversation_not_found")
    return conversation
