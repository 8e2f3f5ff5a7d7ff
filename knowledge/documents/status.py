"""The one writer of a document's status: UPLOADED → QUEUED → PARSING → INDEXING → READY | FAILED.

A run that processes a document holds a claim: a token only it knows, written with the claim,
and a lease its heartbeat keeps extending. Every later write of the run (status, chunk rows,
READY, FAILED) is conditional on the row still carrying its token, so a run whose lease expired
and whose document was handed to another run can no longer change anything: its writes match
no row and it stops with `LeaseLost`. Stale means "lease expired", however long a document
legitimately takes, as long as its worker is alive.

A run may hold several documents at once (a batch shares one token and one heartbeat); each
document still stands alone: one that is lost or fails does not take the others with it.

Every change of status also appends a `DocumentTransition`: the document's timeline.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from knowledge.models import Document, DocumentStatus, DocumentTransition

IN_PROGRESS = (DocumentStatus.PARSING, DocumentStatus.INDEXING)


class LeaseLost(Exception):
    """The run's claim is gone: its lease expired and the document was re-queued or deleted."""


@dataclass(frozen=True)
class Claim:
    document_id: int
    token: str
    worker: str
    attempt: int


def lease_seconds() -> float:
    return float(settings.RAG_INGESTION_LEASE_SECONDS)


def max_attempts() -> int:
    """Runs a document gets (dead workers and transient failures count) before it stays FAILED."""
    return int(settings.RAG_INGESTION_MAX_ATTEMPTS)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:120]


def queue(*, document_ids: Sequence[int], fresh_attempts: bool = False) -> int:
    """Any state → QUEUED (upload, retry, re-index); drops a previous claim. A manual retry
    (`fresh_attempts`) gives the document its full number of attempts again."""
    ids = list(Document.objects.filter(pk__in=list(document_ids)).values_list("pk", flat=True))
    now = timezone.now()
    extra = {"attempts": 0} if fresh_attempts else {}
    count = Document.objects.filter(pk__in=ids).update(
        status=DocumentStatus.QUEUED, error_code="", error_message="", status_changed_at=now,
        lease_token="", lease_expires_at=None, worker="", **extra,
    )
    _record(ids, DocumentStatus.QUEUED, at=now)
    return count


def claim(*, document_id: int, worker: str | None = None) -> Claim | None:
    """QUEUED → PARSING with a fresh token and lease; None when another run has it (or it is
    not queued any more)."""
    claims = claim_many(document_ids=[document_id], worker=worker)
    return claims[0] if claims else None


def claim_many(*, document_ids: Sequence[int], worker: str | None = None) -> list[Claim]:
    """QUEUED → PARSING for those of these documents that are still queued, under one token and
    one lease (one heartbeat keeps them all); the others are left to whoever has them."""
    now = timezone.now()
    token = str(uuid.uuid4())
    worker = worker or worker_name()
    ids = list(document_ids)
    with transaction.atomic():
        claimed = Document.objects.filter(pk__in=ids, status=DocumentStatus.QUEUED).update(
            status=DocumentStatus.PARSING, status_changed_at=now, error_code="", error_message="",
            attempts=F("attempts") + 1, lease_token=token, lease_expires_at=now + timedelta(seconds=lease_seconds()),
            heartbeat_at=now, worker=worker, embedded_chunks=0, chunks_to_embed=0,
        )
        if not claimed:
            return []
        attempts = dict(Document.objects.filter(pk__in=ids, lease_token=token).values_list("pk", "attempts"))
        claims = [
            Claim(document_id=pk, token=token, worker=worker, attempt=attempts[pk]) for pk in ids if pk in attempts
        ]
        _record(claims, DocumentStatus.PARSING, at=now)
    return claims


def held(claim: Claim):
    """The document's row, as a queryset, while the claim holds (for conditional writes)."""
    return Document.objects.filter(pk=claim.document_id, lease_token=claim.token)


def held_ids(claims: Sequence[Claim]) -> set[int]:
    """The ids of these claims' documents that still carry their token."""
    return set(_held_rows(claims).values_list("pk", flat=True))


def heartbeat_many(claims: Sequence[Claim]) -> int:
    """Extend the lease of every document these claims still hold; returns how many."""
    now = timezone.now()
    return _held_rows(claims).update(lease_expires_at=now + timedelta(seconds=lease_seconds()), heartbeat_at=now)


def record_progress(*, progress: Sequence[tuple[Claim, int, int]]) -> set[int]:
    """Store (claim, chunks embedded, chunks to embed) for the documents the claims still hold;
    returns their ids. Not a transition: no timeline row, no status change."""
    still: set[int] = set()
    for claim, done, total in progress:
        if held(claim).update(embedded_chunks=done, chunks_to_embed=total):
            still.add(claim.document_id)
    return still


def advance_many(claims: Sequence[Claim], status: str) -> list[Claim]:
    """PARSING → INDEXING under the claims; returns the claims that still hold."""
    if status not in IN_PROGRESS:
        raise ValueError(f"{status} is not an in-progress status")
    now = timezone.now()
    with transaction.atomic():
        locked = lock_many(claims)
        still = [claim for claim in claims if claim.document_id in locked]
        Document.objects.filter(pk__in=locked).update(status=status, status_changed_at=now)
        _record(still, status, at=now)
    return still


def lock(claim: Claim) -> Document:
    """Lock the row inside the caller's transaction, or raise when the claim is gone."""
    document = held(claim).select_for_update().first()
    if document is None:
        raise _gone(claim)
    return document


def lock_many(claims: Sequence[Claim]) -> set[int]:
    """Lock the rows these claims still hold (inside the caller's transaction); returns their ids."""
    return set(_held_rows(claims).select_for_update().values_list("pk", flat=True))


def finish_many(items: Sequence[tuple[Claim, dict]]) -> list[Claim]:
    """→ READY, each document with its own fields, for those the claims still hold (inside the
    caller's transaction); returns the claims that finished."""
    now = timezone.now()
    with transaction.atomic():
        # Locked with their token inside this transaction, so the claims hold until it commits:
        # one UPDATE per 100 documents instead of one per document.
        locked = lock_many([claim for claim, _fields in items])
        finished = [(claim, fields) for claim, fields in items if claim.document_id in locked]
        names = sorted({name for _claim, fields in finished for name in fields})
        if any(sorted(fields) != names for _claim, fields in finished):
            # bulk_update would write a default into a field a document did not give
            raise ValueError("finish_many needs the same fields for every document")
        rows = [
            Document(pk=claim.document_id, status=DocumentStatus.READY, status_changed_at=now, error_code="",
                     error_message="", lease_token="", lease_expires_at=None, **fields)
            for claim, fields in finished
        ]
        Document.objects.bulk_update(
            rows, ["status", "status_changed_at", "error_code", "error_message", "lease_token", "lease_expires_at", *names],
            batch_size=100,
        )
        _record([claim for claim, _fields in finished], DocumentStatus.READY, at=now)
    return [claim for claim, _fields in finished]


def fail(claim: Claim, *, code: str, message: str) -> bool:
    """→ FAILED under the claim (inside the caller's transaction); False when the claim is gone
    (another run owns the document now: its outcome counts, not this one's)."""
    return _release(claim, DocumentStatus.FAILED, code=code, message=message)


def retry_later(claim: Claim, *, code: str, message: str) -> bool:
    """→ QUEUED with the reason, releasing the claim (a transient failure; a new task follows)."""
    return _release(claim, DocumentStatus.QUEUED, code=code, message=message)


def _release(claim: Claim, status: str, *, code: str, message: str) -> bool:
    now = timezone.now()
    if not held(claim).update(
        status=status, status_changed_at=now, error_code=code[:64], error_message=message,
        lease_token="", lease_expires_at=None,
    ):
        return False
    _record([claim], status, at=now, error_code=code)
    return True


def give_up(*, document_ids: Sequence[int], code: str, message: str) -> int:
    """→ FAILED for documents whose runs keep dying (no claim: the sweep decides)."""
    now = timezone.now()
    with transaction.atomic():
        rows = Document.objects.select_for_update().filter(pk__in=list(document_ids), status__in=IN_PROGRESS)
        ids = list(rows.values_list("pk", flat=True))
        Document.objects.filter(pk__in=ids).update(
            status=DocumentStatus.FAILED, status_changed_at=now, error_code=code[:64],
            error_message=message, lease_token="", lease_expires_at=None,
        )
        _record(ids, DocumentStatus.FAILED, at=now, error_code=code)
    return len(ids)


def stale(*, queued_before) -> tuple[list[int], list[int]]:
    """(in-progress documents whose lease expired, queued documents older than `queued_before`,
    whose task may have been lost between commit and enqueue)."""
    now = timezone.now()
    expired = list(
        Document.objects.filter(status__in=IN_PROGRESS)
        # rows claimed before leases existed have none: their age decides
        .filter(Q(lease_expires_at__lt=now) | Q(lease_expires_at__isnull=True, status_changed_at__lt=queued_before))
        .values_list("pk", flat=True)
    )
    lost = list(
        Document.objects.filter(status=DocumentStatus.QUEUED, status_changed_at__lt=queued_before)
        .values_list("pk", flat=True)
    )
    return expired, lost


def _held_rows(claims: Sequence[Claim]):
    by_token: dict[str, list[int]] = {}
    for claim in claims:
        by_token.setdefault(claim.token, []).append(claim.document_id)
    condition = Q(pk__in=[])
    for token, ids in by_token.items():
        condition |= Q(pk__in=ids, lease_token=token)
    return Document.objects.filter(condition)


def _record(items: Sequence[Claim] | Sequence[int], status: str, *, at, error_code: str = "") -> None:
    """Append the timeline rows of one transition (claims carry attempt and worker)."""
    rows = [
        DocumentTransition(
            document_id=item.document_id, status=status, at=at, attempt=item.attempt,
            worker=item.worker, error_code=error_code[:64],
        )
        if isinstance(item, Claim)
        else DocumentTransition(document_id=item, status=status, at=at, error_code=error_code[:64])
        for item in items
    ]
    DocumentTransition.objects.bulk_create(rows, batch_size=500)


def _gone(claim: Claim) -> Exception:
    if Document.objects.filter(pk=claim.document_id).exists():
        return LeaseLost(f"document {claim.document_id}: the claim of {claim.worker} is gone")
    return Document.DoesNotExist(f"document {claim.document_id} was deleted")
