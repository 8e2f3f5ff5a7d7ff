"""READY facts as counts and the shorter list: a knowledge base where every document answers
lists none of them, the shorter side is the one listed, and candidates of an unlisted side are
confirmed against the version before they may answer."""

from __future__ import annotations

import pytest

from knowledge.catalog import services as catalog_services
from knowledge.models import DocumentStatus
from retrieval import repository as repository_module
from retrieval.repository import DjangoRepository
from tests.conftest import make_document, make_kb, make_ready_version

pytestmark = pytest.mark.django_db


@pytest.fixture
def lists_at_most_two(monkeypatch):
    """A base of a few documents behaves as a large one: at most two READY ids listed at any rate."""
    monkeypatch.setattr(repository_module, "LISTED_READY", 2)


def _published(staff_user, *, ready: int, unpublished: int = 0):
    """A knowledge base whose active version serves `ready` documents, beside `unpublished`
    documents that are in no version."""
    kb = make_kb()
    served = [make_document(kb) for _ in range(ready)]
    catalog_services.activate_version(version=make_ready_version(kb, documents=served), actor=staff_user)
    outside = [make_document(kb) for _ in range(unpublished)]
    return kb, served, outside


def test_a_few_ready_documents_are_listed_whatever_the_other_side(staff_user):
    # given
    kb, served, _ = _published(staff_user, ready=3)
    # when
    facts = DjangoRepository().ready_facts(kb_id=kb.pk, document_ids=None)
    # then: three ids cost less than confirming the candidates after the search
    assert (facts.ready_count, facts.other_count, facts.other_ids) == (3, 0, None)
    assert facts.ready_ids == frozenset(d.pk for d in served)


def test_a_base_where_every_document_answers_is_counted_not_listed(staff_user, lists_at_most_two):
    # given
    kb, served, _ = _published(staff_user, ready=4)
    # when
    facts = DjangoRepository().ready_facts(kb_id=kb.pk, document_ids=None)
    # then
    assert (facts.ready_count, facts.other_count) == (4, 0)
    assert facts.ready_ids is None and facts.other_ids is None
    assert facts.empty_reason == ""


def test_the_shorter_side_is_the_one_listed(staff_user, lists_at_most_two):
    # given: many served and one not, then one served among many not
    many_ready, served, outside = _published(staff_user, ready=5, unpublished=1)
    few_ready, few_served, few_outside = _published(staff_user, ready=1, unpublished=3)
    # when
    mostly = DjangoRepository().ready_facts(kb_id=many_ready.pk, document_ids=None)
    rarely = DjangoRepository().ready_facts(kb_id=few_ready.pk, document_ids=None)
    # then
    assert (mostly.ready_count, mostly.ready_ids, mostly.other_ids) == (5, None, frozenset({outside[0].pk}))
    assert (rarely.ready_count, rarely.ready_ids, rarely.other_ids) == (1, frozenset({few_served[0].pk}), None)
    assert rarely.other_count == 3


def test_the_ready_documents_are_listed_when_asked_for(staff_user, lists_at_most_two):
    kb, served, _ = _published(staff_user, ready=3)
    facts = DjangoRepository().ready_facts(kb_id=kb.pk, document_ids=None, with_ids=True)
    assert facts.ready_ids == frozenset(d.pk for d in served)


def test_several_bases_follow_the_same_policy_in_one_call(staff_user, lists_at_most_two):
    # given
    full, full_served, _ = _published(staff_user, ready=3)
    sparse, sparse_served, _ = _published(staff_user, ready=1, unpublished=2)
    unpublished = make_kb()
    make_document(unpublished)
    # when
    facts = DjangoRepository().ready_facts_many(kb_ids=[full.pk, sparse.pk, unpublished.pk], document_ids=None)
    # then
    assert (facts[full.pk].ready_count, facts[full.pk].ready_ids) == (3, None)
    assert facts[sparse.pk].ready_ids == frozenset({sparse_served[0].pk})
    assert facts[unpublished.pk].ready_count == 0 and facts[unpublished.pk].empty_reason == "no_active_version"
    with_ids = DjangoRepository().ready_facts_many(kb_ids=[full.pk], document_ids=None, with_ids=True)
    assert with_ids[full.pk].ready_ids == frozenset(d.pk for d in full_served)


def test_confirm_keeps_only_the_documents_that_may_answer_now(staff_user):
    # given: a served document, one withdrawn to FAILED, one only in the draft, one elsewhere
    kb, (served, withdrawn), _ = _published(staff_user, ready=2)
    withdrawn.status = DocumentStatus.FAILED
    withdrawn.save(update_fields=["status"])
    draft = catalog_services.create_draft_version(kb=kb, actor=staff_user)
    draft_only = make_document(kb)
    draft.documents.add(draft_only)
    elsewhere, (foreign,), _ = _published(staff_user, ready=1)
    candidates = [served.pk, withdrawn.pk, draft_only.pk, foreign.pk, 987654]
    repository = DjangoRepository()
    # when / then: the active version answers with its READY documents of the base
    assert repository.confirm_ready(kb_ids=[kb.pk], document_ids=candidates) == frozenset({served.pk})
    # a draft under evaluation answers with its own
    assert repository.confirm_ready(kb_ids=[kb.pk], document_ids=candidates, version_id=draft.pk) == frozenset(
        {served.pk, draft_only.pk})
    assert repository.confirm_ready(kb_ids=[kb.pk, elsewhere.pk], document_ids=candidates) == frozenset(
        {served.pk, foreign.pk})
    assert repository.confirm_ready(kb_ids=[kb.pk], document_ids=[]) == frozenset()
