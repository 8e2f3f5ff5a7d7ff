"""Two activations racing on one knowledge base (real transactions, real threads)."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from knowledge.catalog import services as catalog_services
from knowledge.models import KnowledgeBaseVersion, VersionActivation, VersionStatus
from ragsite.errors import DomainError
from tests.conftest import make_document, make_kb, make_ready_version


@pytest.mark.django_db(transaction=True)
def test_concurrent_activations_leave_exactly_one_active_version(staff_user):
    # given
    kb = make_kb()
    first = make_ready_version(kb)
    second = make_ready_version(kb, documents=[make_document(kb)])
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def activate(version):
        try:
            barrier.wait(timeout=10)
            outcomes.append(catalog_services.activate_version(version=version, actor=staff_user, reason="race"))
        except DomainError as error:
            outcomes.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=activate, args=(v,)) for v in (first, second)]
    # when
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    # then
    assert len(outcomes) == 2  # both finished: a switch or a clear domain error, nothing else
    kb.refresh_from_db()
    active = list(KnowledgeBaseVersion.objects.filter(knowledge_base=kb, status=VersionStatus.ACTIVE))
    assert len(active) == 1
    assert kb.active_version == active[0]
    log = list(VersionActivation.objects.filter(knowledge_base=kb).order_by("id"))
    succeeded = [o for o in outcomes if isinstance(o, VersionActivation)]
    # The KB row lock serializes the two: both switch, one after the other, and nothing collides.
    assert len(succeeded) == 2
    assert len(log) == 2
    # The log is a consistent chain: each switch starts where the previous one ended.
    assert log[0].from_version is None
    for earlier, later in zip(log, log[1:]):
        assert later.from_version_id == earlier.to_version_id
    assert log[-1].to_version_id == kb.active_version_id
