"""`access_chunk`: a chunk is readable exactly when its document is (knowledge base + publication)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from knowledge.catalog import services as catalog_services
from knowledge.access import access_chunk
from knowledge.models import Chunk, Visibility
from ragsite.errors import NotFound
from tests.conftest import make_document, make_kb, make_ready_version

pytestmark = pytest.mark.django_db


def chunk_of(document) -> Chunk:
    return Chunk.objects.create(
        document=document, knowledge_base=document.knowledge_base, ordinal=0, content="入职满一年享有 15 天年假。"
    )


def published_chunk(kb, staff_user) -> Chunk:
    document = make_document(kb)
    catalog_services.activate_version(version=make_ready_version(kb, documents=[document]), actor=staff_user)
    return chunk_of(document)


def assert_not_found(user, chunk_id: int) -> None:
    with pytest.raises(NotFound) as missing:
        access_chunk(user=user, chunk_id=chunk_id)
    assert missing.value.code == "chunk_not_found"


def test_published_chunk_of_a_public_kb_is_readable_by_anyone(staff_user):
    # given
    chunk = published_chunk(make_kb(visibility=Visibility.PUBLIC), staff_user)
    # when
    found = access_chunk(user=AnonymousUser(), chunk_id=chunk.pk)
    # then
    assert found == chunk
    assert found.document.knowledge_base == chunk.knowledge_base


def test_internal_kb_hides_its_chunks_from_anonymous_users(member_user, staff_user):
    # given
    chunk = published_chunk(make_kb(visibility=Visibility.INTERNAL), staff_user)
    # then
    assert access_chunk(user=member_user, chunk_id=chunk.pk) == chunk
    assert_not_found(AnonymousUser(), chunk.pk)
    assert_not_found(None, chunk.pk)


def test_restricted_kb_shows_its_chunks_to_its_groups_only(engineers_group, engineer_user, member_user, staff_user):
    # given
    chunk = published_chunk(make_kb(visibility=Visibility.RESTRICTED, groups=[engineers_group]), staff_user)
    # then
    assert access_chunk(user=engineer_user, chunk_id=chunk.pk) == chunk
    assert_not_found(member_user, chunk.pk)


def test_chunk_of_an_unpublished_document_is_for_managers_only(kb_with_active_version, member_user, staff_user):
    # given: a document only in a ready, not yet published, version
    document = make_document(kb_with_active_version)
    make_ready_version(kb_with_active_version, documents=[document])
    chunk = chunk_of(document)
    # then
    assert_not_found(member_user, chunk.pk)
    assert access_chunk(user=staff_user, chunk_id=chunk.pk) == chunk


def test_kb_without_an_active_version_has_no_readable_chunks(kb, member_user):
    # given
    chunk = chunk_of(make_document(kb))
    # then
    assert_not_found(member_user, chunk.pk)


def test_unknown_chunk_is_not_found(member_user):
    assert_not_found(member_user, 424242)
