"""Version state machine, activation and rollback."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from knowledge import epochs
from knowledge.catalog import readiness
from knowledge.catalog import services as catalog_services
from knowledge.models import (
    CacheNamespace,
    DocumentStatus,
    KnowledgeBaseVersion,
    VersionActivation,
    VersionStatus,
)
from knowledge.catalog.selectors import ready_document_ids_of_active_version
from ragsite.errors import Conflict, InvalidTransition
from tests.conftest import make_document, make_ready_version

pytestmark = pytest.mark.django_db


def test_draft_starts_from_active_version_documents(kb_with_active_version, staff_user):
    # given
    active = kb_with_active_version.active_version
    # when
    draft = catalog_services.create_draft_version(kb=kb_with_active_version, actor=staff_user)
    # then
    assert draft.status == VersionStatus.BUILDING
    assert draft.number == active.number + 1
    assert set(draft.documents.all()) == set(active.documents.all())
    assert draft.based_on == active


def test_only_one_draft_per_kb(kb, staff_user):
    # given
    catalog_services.create_draft_version(kb=kb, actor=staff_user)
    # when / then
    with pytest.raises(Conflict) as error:
        catalog_services.create_draft_version(kb=kb, actor=staff_user)
    assert error.value.code == "draft_exists"


def test_mark_ready_refuses_pending_documents(kb, staff_user):
    # given
    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    draft.documents.add(make_document(kb, status=DocumentStatus.READY))
    draft.documents.add(make_document(kb, status=DocumentStatus.PARSING, title="手册"))
    # when
    with pytest.raises(InvalidTransition) as error:
        readiness.mark_version_ready(version=draft)
    # then
    assert error.value.code == "documents_not_ready"
    assert "手册" in str(error.value.message)
    draft.refresh_from_db()
    assert draft.status == VersionStatus.BUILDING


def test_mark_ready_refuses_empty_version(kb, staff_user):
    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    with pytest.raises(InvalidTransition) as error:
        readiness.mark_version_ready(version=draft)
    assert error.value.code == "version_empty"


def test_refresh_readiness_promotes_draft_when_all_documents_ready(kb, staff_user):
    # given
    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    document = make_document(kb, status=DocumentStatus.INDEXING)
    draft.documents.add(document)
    # when
    readiness.refresh_version_readiness(version_ids=[draft.pk])
    draft.refresh_from_db()
    assert draft.status == VersionStatus.BUILDING
    document.status = DocumentStatus.READY
    document.save()
    readiness.refresh_version_readiness(version_ids=[draft.pk])
    # then
    draft.refresh_from_db()
    assert draft.status == VersionStatus.READY
    assert draft.ready_at is not None


def test_activate_switches_pointer_logs_and_bumps_epoch(kb_with_ready_version, staff_user):
    # given
    kb = kb_with_ready_version
    version = kb.versions.get()
    epoch_before = CacheNamespace.objects.get(knowledge_base=kb).cache_epoch
    # when
    activation = catalog_services.activate_version(version=version, actor=staff_user, reason="上线")
    # then
    kb.refresh_from_db()
    version.refresh_from_db()
    assert kb.active_version == version
    assert version.status == VersionStatus.ACTIVE
    assert activation.action == "activate"
    assert activation.actor == staff_user
    assert activation.reason == "上线"
    assert activation.from_version is None
    assert activation.cache_epoch == epoch_before + 1
    assert CacheNamespace.objects.get(knowledge_base=kb).cache_epoch == epoch_before + 1


def test_activate_demotes_previous_active_to_ready(kb_with_active_version, staff_user):
    # given
    kb = kb_with_active_version
    old = kb.active_version
    new = make_ready_version(kb)
    # when
    activation = catalog_services.activate_version(version=new, actor=staff_user)
    # then
    old.refresh_from_db()
    kb.refresh_from_db()
    assert old.status == VersionStatus.READY
    assert kb.active_version == new
    assert activation.from_version == old
    assert KnowledgeBaseVersion.objects.filter(knowledge_base=kb, status=VersionStatus.ACTIVE).count() == 1


@pytest.mark.parametrize("status", [VersionStatus.BUILDING, VersionStatus.RETIRED, VersionStatus.FAILED])
def test_activate_refuses_non_ready_versions(kb, staff_user, status):
    # given
    version = KnowledgeBaseVersion.objects.create(knowledge_base=kb, number=7, status=status)
    # when
    with pytest.raises(InvalidTransition) as error:
        catalog_services.activate_version(version=version, actor=staff_user)
    # then
    assert error.value.code == "version_not_ready"
    kb.refresh_from_db()
    assert kb.active_version is None
    assert not VersionActivation.objects.exists()


def test_activate_refuses_the_active_version_itself(kb_with_active_version, staff_user):
    with pytest.raises(InvalidTransition):
        catalog_services.activate_version(version=kb_with_active_version.active_version, actor=staff_user)


def test_failure_mid_activation_leaves_old_version_active_and_no_log(kb_with_active_version, staff_user, monkeypatch):
    # given
    kb = kb_with_active_version
    old = kb.active_version
    new = make_ready_version(kb)
    epoch_before = CacheNamespace.objects.get(knowledge_base=kb).cache_epoch
    logs_before = VersionActivation.objects.count()

    def broken_bump(*, kb_id):
        raise RuntimeError("database went away mid-activation")

    monkeypatch.setattr(epochs, "bump_epoch", broken_bump)
    # when
    with pytest.raises(RuntimeError):
        catalog_services.activate_version(version=new, actor=staff_user, reason="会失败")
    # then
    kb.refresh_from_db()
    old.refresh_from_db()
    new.refresh_from_db()
    assert kb.active_version == old
    assert old.status == VersionStatus.ACTIVE
    assert new.status == VersionStatus.READY
    assert VersionActivation.objects.count() == logs_before
    assert CacheNamespace.objects.get(knowledge_base=kb).cache_epoch == epoch_before


def test_rollback_defaults_to_previous_active_version(kb_with_two_published_versions, staff_user):
    # given
    kb = kb_with_two_published_versions
    v1, v2 = kb.versions.order_by("number")
    # when
    activation = catalog_services.rollback_version(kb=kb, actor=staff_user, reason="v2 有误")
    # then
    kb.refresh_from_db()
    assert kb.active_version == v1
    assert activation.action == "rollback"
    assert activation.from_version == v2
    assert activation.to_version == v1
    v2.refresh_from_db()
    assert v2.status == VersionStatus.READY  # can be re-activated later


def test_rollback_refuses_newer_target(kb_with_two_published_versions, staff_user):
    # given
    kb = kb_with_two_published_versions
    v1 = kb.versions.get(number=1)
    catalog_services.rollback_version(kb=kb, actor=staff_user, to_version=v1)
    v2 = kb.versions.get(number=2)
    # when / then
    with pytest.raises(InvalidTransition) as error:
        catalog_services.rollback_version(kb=kb, actor=staff_user, to_version=v2)
    assert error.value.code == "not_older_version"


def test_rollback_without_active_version_is_refused(kb, staff_user):
    with pytest.raises(InvalidTransition) as error:
        catalog_services.rollback_version(kb=kb, actor=staff_user)
    assert error.value.code == "no_active_version"


def test_rollback_refuses_retired_target(kb_with_two_published_versions, staff_user):
    # given
    kb = kb_with_two_published_versions
    v1 = kb.versions.get(number=1)
    catalog_services.retire_version(version=v1, actor=staff_user)
    # when / then
    with pytest.raises(InvalidTransition) as error:
        catalog_services.rollback_version(kb=kb, actor=staff_user)
    assert error.value.code == "no_rollback_target"


def test_retire_refuses_active_version(kb_with_active_version, staff_user):
    with pytest.raises(InvalidTransition) as error:
        catalog_services.retire_version(version=kb_with_active_version.active_version, actor=staff_user)
    assert error.value.code == "version_active"


def test_database_refuses_two_active_versions(kb_with_active_version):
    # given
    other = KnowledgeBaseVersion.objects.create(knowledge_base=kb_with_active_version, number=9, status=VersionStatus.READY)
    # when / then
    with pytest.raises(IntegrityError), transaction.atomic():
        KnowledgeBaseVersion.objects.filter(pk=other.pk).update(status=VersionStatus.ACTIVE)


def test_database_refuses_two_drafts(kb):
    KnowledgeBaseVersion.objects.create(knowledge_base=kb, number=1, status=VersionStatus.BUILDING)
    with pytest.raises(IntegrityError), transaction.atomic():
        KnowledgeBaseVersion.objects.create(knowledge_base=kb, number=2, status=VersionStatus.BUILDING)


def test_ready_facts_are_the_active_versions_ready_documents(kb, staff_user):
    # given
    published = make_document(kb)
    draft_only = make_document(kb)
    failed = make_document(kb, status=DocumentStatus.FAILED)
    version = make_ready_version(kb, documents=[published])
    version.documents.add(failed)  # a FAILED document inside the active set is still excluded
    catalog_services.activate_version(version=version, actor=staff_user)
    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    draft.documents.add(draft_only)
    # when
    ids = ready_document_ids_of_active_version(kb_id=kb.pk)
    # then
    assert ids == [published.pk]
    assert ready_document_ids_of_active_version(kb_id=kb.pk, document_ids=[draft_only.pk]) == []
    assert ready_document_ids_of_active_version(kb_id=kb.pk, document_ids=[published.pk, 999999]) == [published.pk]


def test_no_active_version_means_no_facts(kb_with_ready_version):
    assert ready_document_ids_of_active_version(kb_id=kb_with_ready_version.pk) == []


def test_activation_clears_the_in_process_epoch_cache_after_commit(kb_with_ready_version, staff_user, django_capture_on_commit_callbacks):
    # given: the epoch is cached in L1
    kb = kb_with_ready_version
    first, _ = epochs.current_epoch(kb_id=kb.pk)
    assert epochs.current_epoch(kb_id=kb.pk) == (first, True)
    # when
    with django_capture_on_commit_callbacks(execute=True):
        catalog_services.activate_version(version=kb.versions.get(), actor=staff_user)
    # then: the next read goes to the database and sees the new epoch
    assert epochs.current_epoch(kb_id=kb.pk) == (first + 1, False)


def test_epoch_cache_expires_so_other_processes_catch_up(kb, settings):
    # given: another process bumped the epoch (simulated by writing the row directly)
    import time

    settings.RAG_EPOCH_L1_TTL_SECONDS = 0.05
    first, _ = epochs.current_epoch(kb_id=kb.pk)
    CacheNamespace.objects.filter(knowledge_base=kb).update(cache_epoch=first + 5)
    # when / then: served from L1 until the TTL passes, then re-read
    assert epochs.current_epoch(kb_id=kb.pk) == (first, True)
    time.sleep(0.06)
    assert epochs.current_epoch(kb_id=kb.pk) == (first + 5, False)


def test_retiring_an_old_version_keeps_documents_the_active_one_still_holds(kb_with_two_published_versions, staff_user, django_capture_on_commit_callbacks):
    # given: v1's documents are all also in the active v2
    kb = kb_with_two_published_versions
    v1 = kb.versions.get(number=1)
    shared = set(v1.documents.values_list("pk", flat=True))
    # when
    with django_capture_on_commit_callbacks(execute=True):
        catalog_services.retire_version(version=v1, actor=staff_user)
    # then
    from knowledge.models import Document

    assert set(Document.objects.filter(pk__in=shared).values_list("pk", flat=True)) == shared
    assert set(ready_document_ids_of_active_version(kb_id=kb.pk)) >= shared


def test_rollback_to_a_chosen_older_version_not_only_the_previous_one(kb_with_two_published_versions, staff_user):
    # given: v1, v2 and now v3 have been published
    kb = kb_with_two_published_versions
    v3 = make_ready_version(kb)
    catalog_services.activate_version(version=v3, actor=staff_user)
    # when
    catalog_services.rollback_version(kb=kb, actor=staff_user, to_version=kb.versions.get(number=1))
    # then
    kb.refresh_from_db()
    assert kb.active_version.number == 1
