"""Milvus adapter for the `VectorStore` port.

One chunks collection and one FAQ collection per embedding space (model + dimension) and text
analysis. Each holds the dense vector and the text Milvus derives the BM25 sparse vector from:
- analysis "terms-v1" (knowledge bases created since): the terms of `engines.analysis` (codes,
  units, English words, traditional characters, the knowledge base's dictionary), which Milvus
  splits at spaces, stemming English words;
- analysis "jieba" (knowledge bases created before): the raw text, segmented by Milvus's jieba.

The same client code serves every deployment: `http(s)://host:port` reaches a Milvus server (the
Milvus Lite server that `manage.py milvus_server` runs on loopback, Milvus standalone/distributed
or Zilliz Cloud), and a path ending in `.db` makes pymilvus spawn an embedded Milvus Lite that only
this process may open (fine for single-process tools and scripts).

Collections are created lazily on first use and carry a JSON marker in their description
(`{"schema": …, "model": …, "dim": …}`); an existing collection whose marker, fields or index
metrics differ raises `IncompatibleCollection` instead of silently returning wrong results.
Milvus Lite 2.5 ignores collection properties, hence the description.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit, urlunsplit

# pymilvus builds a default connection from the environment's MILVUS_URI while it is imported,
# and refuses a Milvus Lite path there: with the documented MILVUS_URI=/path/to/file.db the
# import itself failed. ragsite passes the URI to every client explicitly (settings.MILVUS_URI),
# so pymilvus is imported with that variable hidden from it.
_milvus_uri_from_env = os.environ.pop("MILVUS_URI", None)
try:
    import grpc
    from pymilvus import DataType, Function, FunctionType, MilvusClient
    from pymilvus.exceptions import (
        CollectionNotExistException,
        ConnectError,
        ConnectionConfigException,
        ConnectionNotExistException,
        MilvusException,
        MilvusUnavailableException,
    )
finally:
    if _milvus_uri_from_env is not None:
        os.environ["MILVUS_URI"] = _milvus_uri_from_env

from engines.analysis import ANALYSIS_VERSION, LEGACY_ANALYSIS, MILVUS_ANALYZER_PARAMS, analysed_query, analysed_text, dictionary_of
from engines.ports import (
    ChunkRecord,
    DocumentFilter,
    FaqRecord,
    IncompatibleCollection,
    KbDocuments,
    VectorHit,
    VectorStoreError,
    VectorStoreUnavailable,
)

logger = logging.getLogger(__name__)

__all__ = [
    "ANALYZER_PARAMS",
    "DenseIndex",
    "MilvusVectorStore",
    "get_vector_store",
    "reset_vector_store_cache",
]

ANALYSES = (ANALYSIS_VERSION, LEGACY_ANALYSIS)
ANALYZER_PARAMS: dict[str, dict[str, Any]] = {
    ANALYSIS_VERSION: MILVUS_ANALYZER_PARAMS,
    LEGACY_ANALYSIS: {"tokenizer": "jieba", "filter": ["lowercase"]},
}
# Schema markers per analysis; the legacy collections keep theirs.
_SCHEMAS = {
    ("chunks", LEGACY_ANALYSIS): "ragsite.chunks.v1",
    ("faqs", LEGACY_ANALYSIS): "ragsite.faqs.v1",
    ("chunks", ANALYSIS_VERSION): "ragsite.chunks.v2",
    ("faqs", ANALYSIS_VERSION): "ragsite.faqs.v2",
}

# Milvus measures VARCHAR max_length in UTF-8 bytes, not characters.
CONTENT_MAX_BYTES = 65_535
QUESTION_MAX_BYTES = 8_192
CONTENT_TYPE_MAX_BYTES = 16

# Bounded so one request stays far below gRPC message limits (server side: 64-256 MB by default).
UPSERT_BATCH_ROWS = 500
UPSERT_BATCH_BYTES = 16 * 1024 * 1024

MAX_TOP_K = 16_384  # Milvus rejects larger `limit`s
MAX_FILTER_IDS = 16_384  # keeps a filter expression a few hundred KB at most

# Creating, indexing and loading may take much longer than a search on a real cluster.
SETUP_TIMEOUT_FLOOR = 60.0

_UNAVAILABLE_GRPC_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}
)
_CONNECT_FAILED = 2  # pymilvus Status.CONNECT_FAILED; also Milvus merr "service unavailable"
_COLLECTION_NOT_FOUND = 100
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LITE_DB_NAME_RE = re.compile(r"^[a-zA-Z0-9.\-_]+$")  # milvus_lite.server.Server's own rule

Kind = Literal["chunks", "faqs"]
T = TypeVar("T")


# --- collection layout ---------------------------------------------------------------------------


# Milvus Lite builds no index of its own: it searches exactly (FLAT) whatever it is asked for, and
# refuses types it does not know.
LITE_DENSE_INDEXES = ("AUTOINDEX", "FLAT", "IVF_FLAT")
SERVER_DENSE_INDEXES = (*LITE_DENSE_INDEXES, "HNSW", "IVF_SQ8", "IVF_PQ", "SCANN", "DISKANN")


@dataclass(frozen=True)
class DenseIndex:
    """How a new chunks or FAQ collection indexes its dense vectors, and what each search asks of
    that index. AUTOINDEX lets a Milvus server choose and tune its graph index; a deployment that
    wants recall and memory under its own control names one (HNSW with M / efConstruction, and
    `ef` per search). It applies when a collection is created: an existing one keeps its index."""

    index_type: str = "AUTOINDEX"
    build_params: dict[str, Any] = field(default_factory=dict)
    search_params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Layout:
    kind: Kind
    schema: str  # marker value; bump the version when fields or analyzers change
    text_field: str
    text_max_bytes: int
    group_field: str  # what `VectorHit.document_id` carries
    scalar_fields: tuple[tuple[str, DataType, int | None], ...]  # (name, type, varchar bytes)
    indexed_scalars: tuple[str, ...]


_CHUNKS = _Layout(
    kind="chunks",
    schema="ragsite.chunks.v1",
    text_field="content",
    text_max_bytes=CONTENT_MAX_BYTES,
    group_field="document_id",
    scalar_fields=(
        ("kb_id", DataType.INT64, None),
        ("document_id", DataType.INT64, None),
        ("content_type", DataType.VARCHAR, CONTENT_TYPE_MAX_BYTES),
    ),
    indexed_scalars=("kb_id", "document_id"),
)

_FAQS = _Layout(
    kind="faqs",
    schema="ragsite.faqs.v1",
    text_field="question",
    text_max_bytes=QUESTION_MAX_BYTES,
    group_field="faq_id",
    scalar_fields=(
        ("kb_id", DataType.INT64, None),
        ("faq_id", DataType.INT64, None),
    ),
    indexed_scalars=("kb_id", "faq_id"),
)

_LAYOUTS: dict[Kind, _Layout] = {"chunks": _CHUNKS, "faqs": _FAQS}

_DENSE = "dense"
_SPARSE = "sparse"
_BM25_FUNCTION = "text_bm25"


def collection_slug(model: str) -> str:
    """A collection-name-safe rendering of an embedding model name.

    Distinct names may share a slug (`bge-m3` / `bge_m3`); the marker then tells them apart and
    the second one gets `IncompatibleCollection` rather than the first one's vectors.
    """
    slug = re.sub(r"[^a-z0-9]+", "_", model.lower()).strip("_") or "model"
    if len(slug) > 48:
        digest = hashlib.sha1(model.encode("utf-8")).hexdigest()[:8]
        slug = f"{slug[:39]}_{digest}"
    return slug


# --- the store -----------------------------------------------------------------------------------


class MilvusVectorStore:
    """`VectorStore` on Milvus; safe to share between threads (one gRPC channel, thread-safe)."""

    def __init__(
        self,
        *,
        uri: str,
        token: str = "",
        collection_prefix: str,
        embedding_model: str,
        dimension: int,
        analysis: str = ANALYSIS_VERSION,
        timeout: float = 10.0,
        consistency_level: str = "Strong",
        dense_index: DenseIndex = DenseIndex(),
    ) -> None:
        uri = os.fspath(uri).strip()
        if not uri:
            raise ValueError("Milvus URI is empty")
        if not _NAME_RE.match(collection_prefix) or len(collection_prefix) > 64:
            raise ValueError(
                f"Milvus collection prefix {collection_prefix!r} must start with a letter or '_' "
                "and contain only letters, digits and '_' (at most 64)"
            )
        if not embedding_model:
            raise ValueError("embedding model name is empty")
        if dimension <= 0:
            raise ValueError(f"embedding dimension must be positive, got {dimension}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        if analysis not in ANALYSES:
            raise ValueError(f"text analysis must be one of {', '.join(ANALYSES)}, got {analysis!r}")
        self._is_local_file = uri.endswith(".db")
        if self._is_local_file:
            name = Path(uri).name
            if not _LITE_DB_NAME_RE.match(name) or len(name) > 36:
                raise ValueError(
                    f"Milvus Lite file name {name!r} must match [a-zA-Z0-9.-_]+ and be at most 36 "
                    "characters"
                )
        elif not uri.startswith(("http://", "https://", "tcp://", "unix:")):
            raise ValueError(
                f"Milvus URI {_redact_uri(uri)!r} must be http(s)://host:port or a path ending "
                "in .db"
            )
        known = LITE_DENSE_INDEXES if self._is_local_file else SERVER_DENSE_INDEXES
        if dense_index.index_type not in known:
            raise ValueError(
                f"dense index {dense_index.index_type!r} is not one of {', '.join(known)}"
                + (" (Milvus Lite)" if self._is_local_file else "")
            )
        self.dense_index = dense_index

        self.uri = uri
        self.embedding_model = embedding_model
        self.dimension = int(dimension)
        self.collection_prefix = collection_prefix
        self.timeout = float(timeout)
        self.consistency_level = consistency_level
        self._token = token
        self._setup_timeout = max(self.timeout, SETUP_TIMEOUT_FLOOR)
        self._safe_uri = _redact_uri(uri)
        self.analysis = analysis
        self._layouts: dict[Kind, _Layout] = {
            kind: replace(layout, schema=_SCHEMAS[(kind, analysis)]) for kind, layout in _LAYOUTS.items()
        }
        slug = collection_slug(embedding_model)
        suffix = "" if analysis == LEGACY_ANALYSIS else "_t1"
        self._names: dict[Kind, str] = {
            "chunks": f"{collection_prefix}_chunks_{slug}_{self.dimension}{suffix}",
            "faqs": f"{collection_prefix}_faqs_{slug}_{self.dimension}{suffix}",
        }
        self._client: MilvusClient | None = None
        self._ready: set[Kind] = set()
        # Guards client creation and collection setup only; calls themselves run in parallel.
        self._setup_lock = threading.RLock()

    def __repr__(self) -> str:
        return (
            f"MilvusVectorStore(uri={self._safe_uri!r}, model={self.embedding_model!r}, "
            f"dimension={self.dimension}, analysis={self.analysis!r})"
        )

    @property
    def chunks_collection(self) -> str:
        return self._names["chunks"]

    @property
    def faqs_collection(self) -> str:
        return self._names["faqs"]

    # --- port: chunks ---------------------------------------------------------------------------

    def upsert_chunks(self, records: Sequence[ChunkRecord], *, dictionary: Sequence[str] = ()) -> None:
        rows: dict[int, dict[str, Any]] = {}
        for record in records:
            content_type = record.content_type or ""
            if len(content_type.encode("utf-8")) > CONTENT_TYPE_MAX_BYTES:
                raise VectorStoreError(
                    f"chunk {record.chunk_id}: content_type {content_type!r} is longer than "
                    f"{CONTENT_TYPE_MAX_BYTES} bytes"
                )
            # Last one wins, as if the records had been upserted one by one.
            rows[int(record.chunk_id)] = {
                "id": int(record.chunk_id),
                "kb_id": int(record.kb_id),
                "document_id": int(record.document_id),
                "content_type": content_type,
                "content": _fit_utf8(
                    self._text(record.content, dictionary), CONTENT_MAX_BYTES,
                    what=f"chunk {record.chunk_id} content",
                ),
                _DENSE: self._vector(record.vector, what=f"chunk {record.chunk_id}"),
            }
        self._upsert("chunks", list(rows.values()))

    def delete_document(self, *, kb_id: int, document_id: int) -> None:
        expr = f"kb_id == {int(kb_id)} and document_id == {int(document_id)}"
        self._call("chunks", "delete document", lambda c, n: self._delete(c, n, expr))

    def search_dense(
        self, *, kb_id: int, vector: Sequence[float], limit: int, documents: DocumentFilter,
        also: Sequence[KbDocuments] = (),
    ) -> list[VectorHit]:
        expr = _scopes_filter((KbDocuments(kb_id, documents), *also))
        if expr is None or limit <= 0:
            return []
        return self._search_dense("chunks", vector=vector, expr=expr, limit=limit)

    def search_sparse(
        self, *, kb_id: int, query: str, limit: int, documents: DocumentFilter,
        dictionary: Sequence[str] = (), also: Sequence[KbDocuments] = (),
    ) -> list[VectorHit]:
        expr = _scopes_filter((KbDocuments(kb_id, documents), *also))
        text = self._query_text(query, dictionary)
        if expr is None or limit <= 0 or not text.strip():
            return []
        return self._search_sparse("chunks", query=text, expr=expr, limit=limit)

    # --- port: FAQs -----------------------------------------------------------------------------

    def upsert_faqs(self, records: Sequence[FaqRecord], *, dictionary: Sequence[str] = ()) -> None:
        rows: dict[int, dict[str, Any]] = {}
        for record in records:
            rows[int(record.record_id)] = {
                "id": int(record.record_id),
                "kb_id": int(record.kb_id),
                "faq_id": int(record.faq_id),
                "question": _fit_utf8(
                    self._text(record.question, dictionary), QUESTION_MAX_BYTES,
                    what=f"FAQ record {record.record_id}",
                ),
                _DENSE: self._vector(record.vector, what=f"FAQ record {record.record_id}"),
            }
        self._upsert("faqs", list(rows.values()))

    def delete_faqs(self, *, kb_id: int, faq_ids: Sequence[int]) -> None:
        ids = sorted({int(i) for i in faq_ids})
        for start in range(0, len(ids), MAX_FILTER_IDS):
            chunk = ids[start : start + MAX_FILTER_IDS]
            expr = f"kb_id == {int(kb_id)} and faq_id in {_id_list(chunk)}"
            self._call("faqs", "delete FAQs", lambda c, n, e=expr: self._delete(c, n, e))

    def search_faq_dense(
        self, *, kb_id: int, vector: Sequence[float], limit: int, also_kb_ids: Sequence[int] = ()
    ) -> list[VectorHit]:
        if limit <= 0:
            return []
        return self._search_dense("faqs", vector=vector, expr=_kbs_filter((kb_id, *also_kb_ids)), limit=limit)

    def search_faq_sparse(
        self, *, kb_id: int, query: str, limit: int, dictionary: Sequence[str] = (),
        also_kb_ids: Sequence[int] = (),
    ) -> list[VectorHit]:
        text = self._query_text(query, dictionary)
        if limit <= 0 or not text.strip():
            return []
        return self._search_sparse("faqs", query=text, expr=_kbs_filter((kb_id, *also_kb_ids)), limit=limit)

    # --- extras (not in the port) ---------------------------------------------------------------

    def chunk_ids(self, *, kb_id: int) -> dict[int, int]:
        """{chunk id: document id} of every stored chunk vector of a knowledge base, paged
        (one `query` stops at 16,384 rows), for consistency checks."""

        def read_all(client: MilvusClient, name: str) -> dict[int, int]:
            pages = client.query_iterator(
                name, batch_size=UPSERT_BATCH_ROWS * 10, filter=f"kb_id == {int(kb_id)}",
                output_fields=["id", "document_id"], timeout=self.timeout,
            )
            found: dict[int, int] = {}
            try:
                while page := pages.next():
                    found.update((int(r["id"]), int(r["document_id"])) for r in page)
            finally:
                pages.close()
            return found

        return self._call("chunks", "list chunk ids", read_all)

    def delete_chunks(self, *, kb_id: int, chunk_ids: Sequence[int]) -> None:
        ids = sorted({int(i) for i in chunk_ids})
        for start in range(0, len(ids), MAX_FILTER_IDS):
            expr = f"kb_id == {int(kb_id)} and id in {_id_list(ids[start : start + MAX_FILTER_IDS])}"
            self._call("chunks", "delete chunks", lambda c, n, e=expr: self._delete(c, n, e))

    def reanalyse_chunks(self, *, kb_id: int, contents: Mapping[int, str], dictionary: Sequence[str]) -> int:
        """Re-derive the BM25 text of these chunks (a changed dictionary) keeping their vectors:
        no re-embedding, and the chunks stay searchable throughout. Returns rows rewritten;
        ids without a row (not indexed yet) are skipped."""
        ids = sorted(int(i) for i in contents)
        rewritten = 0
        for start in range(0, len(ids), UPSERT_BATCH_ROWS):
            batch = ids[start : start + UPSERT_BATCH_ROWS]
            expr = f"kb_id == {int(kb_id)} and id in {_id_list(batch)}"
            rows = self._call(
                "chunks", "read chunks",
                lambda c, n, e=expr, size=len(batch): c.query(
                    n, filter=e, output_fields=["id", "kb_id", "document_id", "content_type", _DENSE],
                    limit=size, timeout=self.timeout,
                ),
            )
            updated = []
            for row in rows:
                chunk_id = int(row["id"])
                updated.append({
                    "id": chunk_id, "kb_id": int(row["kb_id"]), "document_id": int(row["document_id"]),
                    "content_type": row["content_type"],
                    "content": _fit_utf8(self._text(contents[chunk_id], dictionary), CONTENT_MAX_BYTES,
                                         what=f"chunk {chunk_id} content"),
                    _DENSE: [float(v) for v in row[_DENSE]],
                })
            self._upsert("chunks", updated)
            rewritten += len(updated)
        return rewritten

    def delete_knowledge_base(self, *, kb_id: int) -> None:
        """Every chunk and FAQ vector of a knowledge base."""
        expr = f"kb_id == {int(kb_id)}"
        for kind in ("chunks", "faqs"):
            self._call(kind, "delete knowledge base", lambda c, n: self._delete(c, n, expr))

    def ensure_collections(self) -> None:
        """Create/verify/load both collections now instead of on first use (startup checks)."""
        for kind in ("chunks", "faqs"):
            self._ensure_collection(kind)

    def ping(self) -> None:
        """Raise `VectorStoreUnavailable` unless the server answers within the timeout."""
        with self._translated("ping", None):
            self._get_client().list_collections(timeout=self.timeout)

    def close(self) -> None:
        with self._setup_lock:
            client, self._client = self._client, None
            self._ready.clear()
        if client is not None:
            with self._translated("close", None):
                client.close()

    # --- internals: data calls ------------------------------------------------------------------

    def _text(self, text: str, dictionary: Sequence[str]) -> str:
        """What the BM25 function reads: the analysed terms, or the raw text for legacy jieba."""
        if self.analysis == LEGACY_ANALYSIS:
            return text
        return analysed_text(text, dictionary=dictionary_of(tuple(dictionary)))

    def _query_text(self, query: str, dictionary: Sequence[str]) -> str:
        if self.analysis == LEGACY_ANALYSIS:
            return query
        return analysed_query(query, dictionary=dictionary_of(tuple(dictionary)))

    def _vector(self, vector: Sequence[float], *, what: str) -> list[float]:
        values = vector.tolist() if hasattr(vector, "tolist") else list(vector)
        if len(values) != self.dimension:
            raise VectorStoreError(
                f"{what}: vector has {len(values)} dimensions, the collection expects "
                f"{self.dimension} ({self.embedding_model})"
            )
        floats = [float(v) for v in values]
        if not all(map(math.isfinite, floats)):
            # Milvus stores NaN/inf silently; such a row is never found by dense search again.
            raise VectorStoreError(f"{what}: vector contains NaN or infinite values")
        return floats

    def _upsert(self, kind: Kind, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        text_field = self._layouts[kind].text_field
        for batch in _batches(rows, text_field=text_field, dimension=self.dimension):
            self._call(kind, f"upsert {kind}", lambda c, n, b=batch: self._upsert_batch(c, n, b))

    def _upsert_batch(self, client: MilvusClient, name: str, batch: list[dict[str, Any]]) -> None:
        client.upsert(name, batch, timeout=self.timeout)

    def _delete(self, client: MilvusClient, name: str, expr: str) -> None:
        client.delete(name, filter=expr, timeout=self.timeout)

    def _search_dense(
        self, kind: Kind, *, vector: Sequence[float], expr: str, limit: int
    ) -> list[VectorHit]:
        query_vector = self._vector(vector, what="query")
        group_field = self._layouts[kind].group_field
        result = self._call(
            kind,
            "dense search",
            lambda c, n: c.search(
                n,
                data=[query_vector],
                anns_field=_DENSE,
                filter=expr,
                limit=min(limit, MAX_TOP_K),
                output_fields=[group_field],
                search_params={"metric_type": "COSINE", **(
                    {"params": dict(self.dense_index.search_params)} if self.dense_index.search_params else {}
                )},
                timeout=self.timeout,
            ),
        )
        return _hits(result, group_field=group_field)

    def _search_sparse(self, kind: Kind, *, query: str, expr: str, limit: int) -> list[VectorHit]:
        layout = self._layouts[kind]
        text = _fit_utf8(query, layout.text_max_bytes, what="BM25 query")

        def search(client: MilvusClient, name: str):
            try:
                return client.search(
                    name,
                    data=[text],
                    anns_field=_SPARSE,
                    filter=expr,
                    limit=min(limit, MAX_TOP_K),
                    output_fields=[layout.group_field],
                    search_params={"metric_type": "BM25"},
                    timeout=self.timeout,
                )
            except MilvusException as exc:
                # A collection that never held a row has no BM25 statistics (average length 0):
                # Milvus weighs the query with NaN and refuses it. Nothing is there to find.
                if _NO_BM25_STATISTICS in (exc.message or ""):
                    return [[]]
                raise

        result = self._call(kind, "BM25 search", search)
        return _hits(result, group_field=layout.group_field)

    def _call(self, kind: Kind, action: str, fn: Callable[[MilvusClient, str], T]) -> T:
        for attempt in (1, 2):
            name = self._ensure_collection(kind)
            client = self._get_client()
            try:
                return fn(client, name)
            except MilvusException as exc:
                # Dropped behind our back (another process, an operator): set it up again once.
                if attempt == 1 and _is_collection_missing(exc):
                    logger.warning("Milvus collection %s disappeared; recreating it", name)
                    self._ready.discard(kind)
                    continue
                raise self._error(exc, action, name) from exc
            except (grpc.RpcError, grpc.FutureTimeoutError) as exc:
                raise self._error(exc, action, name) from exc
        raise AssertionError("unreachable")

    # --- internals: connection and collection setup ---------------------------------------------

    def _get_client(self) -> MilvusClient:
        client = self._client
        if client is not None:
            return client
        with self._setup_lock:
            if self._client is None:
                if self._is_local_file:
                    try:
                        Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
                    except OSError as exc:
                        raise VectorStoreUnavailable(
                            f"Milvus at {self._safe_uri} cannot be opened (connect): {exc}"
                        ) from exc
                with self._translated("connect", None):
                    self._client = MilvusClient(
                        uri=self.uri,
                        token=self._token,
                        timeout=self.timeout,
                        grpc_options=self._grpc_options(),
                    )
            return self._client

    def _grpc_options(self) -> dict[str, Any]:
        # pymilvus recovers from UNAVAILABLE by opening a new channel; with gRPC's global
        # subchannel pool that channel would inherit the dead connection's reconnect backoff
        # (1 s and growing) and fail at once, so the first requests after Milvus restarts
        # would still be refused. A channel of its own connects immediately.
        options: dict[str, Any] = {"grpc.use_local_subchannel_pool": 1}
        if _is_local_target(self.uri):
            # pymilvus pings idle connections every 10 s; Milvus Lite's gRPC server tolerates
            # that only every 5 min and answers with "too_many_pings" GOAWAYs (error lines on
            # stderr, a reconnect on the next call). Nothing drops idle loopback connections.
            options["grpc.keepalive_permit_without_calls"] = False
        return options

    def _ensure_collection(self, kind: Kind) -> str:
        name = self._names[kind]
        if kind in self._ready:
            return name
        with self._setup_lock:
            if kind in self._ready:
                return name
            client = self._get_client()
            layout = self._layouts[kind]
            with self._translated("prepare collection", name):
                if not client.has_collection(name, timeout=self.timeout):
                    self._create(client, name, layout)
                description = client.describe_collection(name, timeout=self.timeout)
                problems = self._schema_problems(description, layout)
                if problems:
                    raise IncompatibleCollection(
                        f"Milvus collection {name!r} is incompatible with this configuration "
                        f"({layout.schema}, model {self.embedding_model!r}, dimension "
                        f"{self.dimension}): {'; '.join(problems)}. Use another "
                        "MILVUS_COLLECTION_PREFIX, or drop the collection and re-index."
                    )
                self._ensure_indexes(client, name, layout)
                state = client.get_load_state(name, timeout=self.timeout).get("state")
                if getattr(state, "name", str(state)) != "Loaded":
                    client.load_collection(name, timeout=self._setup_timeout)
            self._ready.add(kind)
            return name

    def _marker(self, layout: _Layout) -> dict[str, Any]:
        return {"schema": layout.schema, "model": self.embedding_model, "dim": self.dimension}

    def _create(self, client: MilvusClient, name: str, layout: _Layout) -> None:
        schema = MilvusClient.create_schema(
            auto_id=False,
            enable_dynamic_field=False,
            description=json.dumps(self._marker(layout), ensure_ascii=False, sort_keys=True),
        )
        schema.add_field("id", DataType.INT64, is_primary=True)
        for field_name, dtype, max_bytes in layout.scalar_fields:
            if max_bytes is None:
                schema.add_field(field_name, dtype)
            else:
                schema.add_field(field_name, dtype, max_length=max_bytes)
        schema.add_field(
            layout.text_field,
            DataType.VARCHAR,
            max_length=layout.text_max_bytes,
            enable_analyzer=True,
            analyzer_params=ANALYZER_PARAMS[self.analysis],
        )
        schema.add_field(_SPARSE, DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field(_DENSE, DataType.FLOAT_VECTOR, dim=self.dimension)
        schema.add_function(
            Function(
                name=_BM25_FUNCTION,
                function_type=FunctionType.BM25,
                input_field_names=[layout.text_field],
                output_field_names=[_SPARSE],
            )
        )
        try:
            client.create_collection(
                name,
                schema=schema,
                consistency_level=self.consistency_level,
                timeout=self._setup_timeout,
            )
            logger.info("Created Milvus collection %s", name)
        except MilvusException as exc:
            # Another process won the race. Milvus accepts an identical second create; this
            # covers servers that refuse it. A different schema is reported by the check below.
            if not _already_exists(exc):
                raise

    def _ensure_indexes(self, client: MilvusClient, name: str, layout: _Layout) -> None:
        wanted_metrics = {_DENSE: "COSINE", _SPARSE: "BM25"}
        for field_name, metric in wanted_metrics.items():
            existing = client.list_indexes(name, field_name=field_name, timeout=self.timeout)
            if existing:
                info = client.describe_index(name, existing[0], timeout=self.timeout) or {}
                got = str(info.get("metric_type", "")).upper()
                if got and got != metric:
                    raise IncompatibleCollection(
                        f"Milvus collection {name!r} is incompatible: field {field_name!r} is "
                        f"indexed with metric {got}, expected {metric}. Drop the collection and "
                        "re-index."
                    )
                index_type = str(info.get("index_type", "")).upper()
                if field_name == _DENSE and index_type and index_type != self.dense_index.index_type:
                    logger.warning(
                        "Milvus collection %s keeps its %s index; %s applies to new collections "
                        "(re-index to change it)", name, index_type, self.dense_index.index_type,
                    )
                continue
            params = MilvusClient.prepare_index_params()
            if field_name == _DENSE:
                params.add_index(
                    _DENSE, index_name=_DENSE, index_type=self.dense_index.index_type, metric_type=metric,
                    **({"params": dict(self.dense_index.build_params)} if self.dense_index.build_params else {}),
                )
            else:
                params.add_index(
                    _SPARSE,
                    index_name=_SPARSE,
                    index_type="SPARSE_INVERTED_INDEX",
                    metric_type=metric,
                )
            self._create_index(client, name, params)
        for field_name in layout.indexed_scalars:
            if client.list_indexes(name, field_name=field_name, timeout=self.timeout):
                continue
            params = MilvusClient.prepare_index_params()
            # INVERTED works on Milvus Lite 2.5 and on servers; Lite rejects STL_SORT.
            params.add_index(field_name, index_name=field_name, index_type="INVERTED")
            try:
                self._create_index(client, name, params)
            except MilvusException as exc:
                if _is_unavailable(exc):
                    raise
                # Filters still work without a scalar index, only slower.
                logger.warning(
                    "Milvus collection %s: scalar index on %s not created: %s",
                    name,
                    field_name,
                    _short(exc),
                )

    def _create_index(self, client: MilvusClient, name: str, params: Any) -> None:
        try:
            # sync=False: pymilvus would otherwise poll the build state (0.5 s sleeps per index)
            # although a new, empty collection has nothing to build; loading does the waiting.
            client.create_index(name, params, timeout=self._setup_timeout, sync=False)
        except MilvusException as exc:
            if not _already_exists(exc):
                raise

    def _schema_problems(self, description: dict[str, Any], layout: _Layout) -> list[str]:
        problems: list[str] = []
        raw = description.get("description") or ""
        try:
            marker = json.loads(raw)
        except ValueError:
            marker = None
        if not isinstance(marker, dict) or "schema" not in marker:
            problems.append(
                "it has no ragsite schema marker in its description (created by another tool "
                "or an older version)"
            )
        else:
            expected = self._marker(layout)
            if marker.get("schema") != expected["schema"]:
                problems.append(
                    f"schema marker is {marker.get('schema')!r}, expected {expected['schema']!r}"
                )
            if marker.get("model") != expected["model"]:
                problems.append(f"built for embedding model {marker.get('model')!r}")
            if marker.get("dim") != expected["dim"]:
                problems.append(f"marker says dimension {marker.get('dim')!r}")

        fields = {f.get("name"): f for f in description.get("fields", [])}
        expected_types: dict[str, DataType] = {"id": DataType.INT64}
        expected_types.update({n: t for n, t, _ in layout.scalar_fields})
        expected_types[layout.text_field] = DataType.VARCHAR
        expected_types[_SPARSE] = DataType.SPARSE_FLOAT_VECTOR
        expected_types[_DENSE] = DataType.FLOAT_VECTOR
        missing = [n for n in expected_types if n not in fields]
        if missing:
            problems.append(f"missing fields {', '.join(missing)}")
        unexpected = [n for n in fields if n not in expected_types]
        if unexpected:
            problems.append(f"unexpected fields {', '.join(map(str, unexpected))}")
        for field_name, dtype in expected_types.items():
            spec = fields.get(field_name)
            if spec is None:
                continue
            got = spec.get("type")
            if got != dtype:
                got_name = getattr(got, "name", str(got))
                problems.append(f"field {field_name!r} is {got_name}, expected {dtype.name}")
        if "id" in fields and not fields["id"].get("is_primary"):
            problems.append("field 'id' is not the primary key")
        if description.get("auto_id"):
            problems.append("primary key uses auto_id")

        dense = fields.get(_DENSE)
        if dense is not None:
            dim = (dense.get("params") or {}).get("dim")
            if dim is not None and int(dim) != self.dimension:
                problems.append(
                    f"dense vectors have dimension {int(dim)}, expected {self.dimension}"
                )
        text = fields.get(layout.text_field)
        if text is not None:
            params = text.get("params") or {}
            if str(params.get("enable_analyzer", "")).lower() != "true":
                problems.append(f"field {layout.text_field!r} has no analyzer")
            else:
                analyzer = params.get("analyzer_params")
                if isinstance(analyzer, str):
                    try:
                        analyzer = json.loads(analyzer)
                    except ValueError:
                        analyzer = None
                wanted = ANALYZER_PARAMS[self.analysis]["tokenizer"]
                if not isinstance(analyzer, dict) or analyzer.get("tokenizer") != wanted:
                    problems.append(f"field {layout.text_field!r} is not analysed with {wanted}")
            max_length = params.get("max_length")
            if max_length is not None and int(max_length) < layout.text_max_bytes:
                problems.append(
                    f"field {layout.text_field!r} holds {int(max_length)} bytes, "
                    f"expected {layout.text_max_bytes}"
                )
        # Milvus Lite reports no functions, only `is_function_output` on the sparse field.
        functions = description.get("functions") or []
        if functions:
            bm25 = [
                f
                for f in functions
                if _function_type_name(f.get("type")) == "BM25"
                and list(f.get("input_field_names") or []) == [layout.text_field]
                and list(f.get("output_field_names") or []) == [_SPARSE]
            ]
            if not bm25:
                problems.append(f"no BM25 function from {layout.text_field!r} to {_SPARSE!r}")
        elif _SPARSE in fields and not fields[_SPARSE].get("is_function_output"):
            problems.append(f"field {_SPARSE!r} is not filled by a BM25 function")
        return problems

    # --- internals: errors ----------------------------------------------------------------------

    def _translated(self, action: str, collection: str | None) -> _Translate:
        return _Translate(self, action, collection)

    def _error(self, exc: BaseException, action: str, collection: str | None) -> VectorStoreError:
        where = f" on collection {collection!r}" if collection else ""
        if _is_unavailable(exc):
            if _is_timeout(exc):
                reason = f"no answer within {self.timeout:g}s"
            else:
                reason = "cannot connect (server down or unreachable)"
            logger.warning("Milvus %s%s failed: %s", action, where, _short(exc))
            return VectorStoreUnavailable(
                f"Milvus at {self._safe_uri} is unavailable: {reason} ({action}{where})"
            )
        if isinstance(exc, ConnectionConfigException):
            return VectorStoreUnavailable(
                f"Milvus at {self._safe_uri} cannot be opened ({action}): "
                f"{self._scrub(_short(exc))}"
            )
        return VectorStoreError(f"Milvus {action}{where} failed: {self._scrub(_short(exc))}")

    def _scrub(self, message: str) -> str:
        if self._token:
            message = message.replace(self._token, "***")
        return message.replace(self.uri, self._safe_uri)


class _Translate:
    """Context manager turning pymilvus/gRPC failures into the port's errors."""

    def __init__(self, store: MilvusVectorStore, action: str, collection: str | None) -> None:
        self._store = store
        self._action = action
        self._collection = collection

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or isinstance(exc, VectorStoreError):
            return False
        if isinstance(exc, (MilvusException, grpc.RpcError, grpc.FutureTimeoutError)):
            raise self._store._error(exc, self._action, self._collection) from exc
        return False


# --- helpers -------------------------------------------------------------------------------------


def _search_filter(*, kb_id: int, group_field: str, documents: DocumentFilter) -> str | None:
    """The filter expression, or None when the document filter admits nothing."""
    parts = [f"kb_id == {int(kb_id)}"]
    if documents.include is not None:
        include = sorted({int(i) for i in documents.include})
        if not include:
            return None
        parts.append(f"{group_field} in {_id_list(include)}")
    if documents.exclude:
        exclude = sorted({int(i) for i in documents.exclude})
        parts.append(f"{group_field} not in {_id_list(exclude)}")
    return " and ".join(parts)


def _kbs_filter(kb_ids: Sequence[int]) -> str:
    ids = sorted({int(i) for i in kb_ids})
    return f"kb_id == {ids[0]}" if len(ids) == 1 else f"kb_id in {_id_list(ids)}"


def _scopes_filter(scopes: Sequence[KbDocuments]) -> str | None:
    """One expression over several knowledge bases, each with its own document filter, or None
    when none of them admits anything. Bases without a filter share one `kb_id in [...]` term."""
    unfiltered = sorted({s.kb_id for s in scopes if s.documents.include is None and not s.documents.exclude})
    terms = [_kbs_filter(unfiltered)] if unfiltered else []
    for scope in scopes:
        if scope.kb_id in unfiltered:
            continue
        expr = _search_filter(kb_id=scope.kb_id, group_field="document_id", documents=scope.documents)
        if expr is not None:
            terms.append(expr)
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else " or ".join(f"({term})" for term in terms)


def _id_list(ids: Sequence[int]) -> str:
    # Ints only (already coerced), so no quoting or injection concerns; Milvus Lite 2.5 does not
    # support filter templates (`filter_params`).
    return "[" + ", ".join(str(int(i)) for i in ids) + "]"


def _hits(result: Any, *, group_field: str) -> list[VectorHit]:
    if not result:
        return []
    hits = [
        VectorHit(
            id=int(hit["id"]),
            document_id=int(hit["entity"][group_field]),
            score=float(hit["distance"]),
        )
        for hit in result[0]
    ]
    # COSINE similarity and BM25 are both "higher is better"; ties in id order keep runs stable.
    hits.sort(key=lambda h: (-h.score, h.id))
    return hits


def _fit_utf8(text: str, max_bytes: int, *, what: str) -> str:
    """`text` cut at a character boundary to at most `max_bytes` UTF-8 bytes."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from a broken extractor
        data = text.encode("utf-8", errors="replace")
        text = data.decode("utf-8")
    if len(data) <= max_bytes:
        return text
    logger.warning(
        "%s is %d UTF-8 bytes; Milvus indexes only the first %d (the database keeps it whole)",
        what,
        len(data),
        max_bytes,
    )
    return data[:max_bytes].decode("utf-8", errors="ignore")


def _batches(
    rows: list[dict[str, Any]], *, text_field: str, dimension: int
) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    size = 0
    vector_bytes = 4 * dimension + 64
    for row in rows:
        row_bytes = len(row[text_field].encode("utf-8")) + vector_bytes
        if batch and (len(batch) >= UPSERT_BATCH_ROWS or size + row_bytes > UPSERT_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(row)
        size += row_bytes
    if batch:
        yield batch


def _is_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectError, MilvusUnavailableException, ConnectionNotExistException)):
        return True
    if isinstance(exc, grpc.FutureTimeoutError):
        return True
    if isinstance(exc, MilvusException):
        code = exc.code
        if isinstance(code, grpc.StatusCode):  # pymilvus gave up retrying a gRPC error
            return code in _UNAVAILABLE_GRPC_CODES
        return code == _CONNECT_FAILED
    if isinstance(exc, grpc.RpcError):
        code_fn = getattr(exc, "code", None)
        return callable(code_fn) and code_fn() in _UNAVAILABLE_GRPC_CODES
    return False


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, grpc.FutureTimeoutError):
        return True
    if isinstance(exc, MilvusException):
        return exc.code == grpc.StatusCode.DEADLINE_EXCEEDED
    code_fn = getattr(exc, "code", None)
    return callable(code_fn) and code_fn() == grpc.StatusCode.DEADLINE_EXCEEDED


_NO_BM25_STATISTICS = "Invalid sparse row: NaN or Inf"


def _is_collection_missing(exc: MilvusException) -> bool:
    if isinstance(exc, CollectionNotExistException) or exc.code == _COLLECTION_NOT_FOUND:
        return True
    return "collection not found" in (exc.message or "").lower()


def _already_exists(exc: MilvusException) -> bool:
    message = (exc.message or "").lower()
    # "duplicate … with different parameters" included: the schema check that follows reports
    # exactly what differs, which is more useful than the server's one-liner.
    return "already exist" in message or "duplicate" in message


def _function_type_name(value: Any) -> str:
    name = getattr(value, "name", None)
    if name:
        return str(name).upper()
    if value == FunctionType.BM25 or value == int(FunctionType.BM25):
        return "BM25"
    return str(value).upper()


def _short(exc: BaseException) -> str:
    message = exc.message if isinstance(exc, MilvusException) else str(exc)
    if not message and isinstance(exc, grpc.RpcError):
        details = getattr(exc, "details", None)
        message = details() if callable(details) else ""
    message = (message or type(exc).__name__).split(", debug=")[0].splitlines()[0]
    return message[:300]


def is_embedded(uri: str) -> bool:
    """A Milvus Lite file: opened by one process at a time."""
    return uri.endswith(".db")


def _is_local_target(uri: str) -> bool:
    if uri.endswith(".db") or uri.startswith("unix:"):
        return True
    host = urlsplit(uri).hostname or ""
    return host in {"localhost", "127.0.0.1", "::1"}


def _redact_uri(uri: str) -> str:
    if uri.endswith(".db") or "://" not in uri:
        return uri
    parts = urlsplit(uri)
    if not (parts.username or parts.password):
        return uri
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


# --- factory -------------------------------------------------------------------------------------

_stores: dict[tuple[str, str, str, str, int, str], MilvusVectorStore] = {}
_stores_lock = threading.Lock()


def get_vector_store(
    *, embedding_model: str, dimension: int, analysis: str = ANALYSIS_VERSION
) -> MilvusVectorStore:
    """The process-wide store for one embedding space and text analysis, configured from Django
    settings (a knowledge base passes its own three values).

    Reads MILVUS_URI, MILVUS_TOKEN and MILVUS_COLLECTION_PREFIX. Does not connect: the first
    call that needs Milvus does, so a server that is down fails that call, not startup.
    """
    from django.conf import settings
    from django.core.exceptions import ImproperlyConfigured

    uri = os.fspath(getattr(settings, "MILVUS_URI", "") or "")
    if not uri:
        raise ImproperlyConfigured("MILVUS_URI is not set (a *.db path or http://host:port)")
    token = getattr(settings, "MILVUS_TOKEN", "") or ""
    prefix = getattr(settings, "MILVUS_COLLECTION_PREFIX", "") or ""
    if not prefix:
        raise ImproperlyConfigured("MILVUS_COLLECTION_PREFIX is not set")
    dense_index = DenseIndex(
        index_type=str(getattr(settings, "MILVUS_DENSE_INDEX", "AUTOINDEX") or "AUTOINDEX").upper(),
        build_params=_json_setting(settings, "MILVUS_DENSE_INDEX_PARAMS"),
        search_params=_json_setting(settings, "MILVUS_DENSE_SEARCH_PARAMS"),
    )
    key = (uri, token, prefix, embedding_model, int(dimension), analysis, repr(dense_index))
    with _stores_lock:
        store = _stores.get(key)
        if store is None:
            try:
                store = MilvusVectorStore(
                    uri=uri,
                    token=token,
                    collection_prefix=prefix,
                    embedding_model=embedding_model,
                    dimension=int(dimension),
                    analysis=analysis,
                    dense_index=dense_index,
                )
            except ValueError as exc:
                raise ImproperlyConfigured(f"Milvus settings: {exc}") from exc
            _stores[key] = store
        return store


def _json_setting(settings: Any, name: str) -> dict[str, Any]:
    from django.core.exceptions import ImproperlyConfigured

    raw = getattr(settings, name, "") or ""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, e.g. {{\"M\": 16}}")
    return value


def reset_vector_store_cache() -> None:
    """Forget (and close) the cached stores; for tests that change Milvus settings."""
    with _stores_lock:
        stores = list(_stores.values())
        _stores.clear()
    for store in stores:
        try:
            store.close()
        except VectorStoreError:
            logger.warning("Closing %r failed", store)
