"""The L2 retrieval cache on Redis (production backend): miss, hit, epoch bump, outage."""

from __future__ import annotations

from .fakes import FakeRepository, FakeStore
from .test_service import CHUNKS, Epochs, make_service, request


def test_candidates_and_embeddings_round_trip_through_redis(redis_cache):
    # given
    epochs = Epochs()
    store = FakeStore(CHUNKS)
    service = make_service(store=store, epochs=epochs)
    # when
    first = service.retrieve(request())
    second = service.retrieve(request())
    epochs.epoch += 1
    third = service.retrieve(request())
    # then
    stages = lambda r: [(e.stage, e.hit) for e in r.trace.cache.events if e.stage != "epoch"]
    assert ("doc_retrieval", False) in stages(first)
    assert ("doc_retrieval", True) in stages(second)
    assert ("doc_retrieval", False) in stages(third) and ("query_embedding", True) in stages(third)
    assert second.results == first.results


def test_redis_outage_degrades_to_recomputation(settings):
    # given: a Redis that is not there
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "redis://127.0.0.1:9/0"}}
    service = make_service(repository=FakeRepository(chunks=dict(CHUNKS), ready={10, 20}), epochs=Epochs())
    # when
    response = service.retrieve(request())
    # then
    assert response.results
    assert [e.hit for e in response.trace.cache.events if e.stage == "doc_retrieval"] == [False]
