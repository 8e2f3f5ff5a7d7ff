"""The services' own actor checks fail closed for a reader who is not signed in: only a
command or task (actor None) acts as the operator."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from knowledge.models import KnowledgeBase
from knowledge.catalog.services import create_knowledge_base
from ragsite.errors import ValidationFailed


@pytest.mark.django_db
def test_an_anonymous_actor_is_not_the_operator():
    # given a caller that forgot its own login check and passes the request's anonymous user
    actor = AnonymousUser()

    # when it creates a knowledge base without a publisher group it shares
    with pytest.raises(ValidationFailed) as refused:
        create_knowledge_base(slug="anon-kb", name="匿名", actor=actor)

    # then the service refuses and nothing is created
    assert refused.value.code == "publisher_group_required"
    assert not KnowledgeBase.objects.filter(slug="anon-kb").exists()


@pytest.mark.django_db
def test_a_command_without_a_user_acts_as_the_operator():
    # given a management command or task, which acts without a user
    # when it creates a knowledge base
    kb = create_knowledge_base(slug="ops-kb", name="运维", actor=None)

    # then it is created as the operator would create it
    assert KnowledgeBase.objects.get(pk=kb.pk).slug == "ops-kb"
