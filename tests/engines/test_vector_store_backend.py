"""The vector store is chosen by dotted path, like the model adapters."""

from __future__ import annotations

from engines.milvus_store import MilvusVectorStore
from engines.ports import VectorStore
from engines.providers import get_vector_store


class RecordingStore:
    """A stand-in backend: remembers the space it was built for."""

    made: list[tuple[str, int, str]] = []

    def __init__(self, *, embedding_model: str, dimension: int, analysis: str) -> None:
        RecordingStore.made.append((embedding_model, dimension, analysis))


def test_the_default_backend_is_milvus_and_keeps_the_port(settings, tmp_path):
    # given
    settings.MILVUS_URI = str(tmp_path / "milvus.db")
    # when
    store = get_vector_store(embedding_model="local-e5-small-v1", dimension=384, analysis="terms-v1")
    # then: every method the apps call is on the port
    assert isinstance(store, MilvusVectorStore) and isinstance(store, VectorStore)


def test_a_deployment_names_its_own_backend(settings):
    # given
    settings.RAG_VECTOR_STORE = "tests.engines.test_vector_store_backend.RecordingStore"
    # when
    store = get_vector_store(embedding_model="m", dimension=8, analysis="terms-v1")
    # then
    assert isinstance(store, RecordingStore) and RecordingStore.made[-1] == ("m", 8, "terms-v1")
