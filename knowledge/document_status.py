"""The one writer of a document's status: UPLOADED → QUEUED → PARSING → INDEXING → READY | FAILED.

A run that processes a document holds a claim: a token only it knows, written with the claim,
and a lease its heartbeat keeps extending. Every later write of the run (status, chunk rows,
READY, FAILED) is conditional on the row still carrying its token, so a run whose lease expired
and whose document was handed to another run can no longer change anything: its writes match
no row and it stops with `LeaseLost`. Stale means "lease expired", however long a document
legitimately takes, as long as its worker is alive.
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

from .models import Document, DocumentStatus

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
    return float(getattr(settings, "RAG_INGESTION_LEASE_SECONDS", 120))


def max_attempts() -> int:
    """Runs a document gets (dead workers and transient failures count) before it stays FAILED."""
    return int(getattr(settings, "RAG_INGESTION_MAX_ATTEMPTS", 3))


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:120]


def queue(*, document_ids: Sequence[int], fresh_attempts: bool = False) -> int:
    """Any state → QUEUED (upload, retry, re-index); drops a previous claim. A manual retry
    (`fresh_attempts`) gives the document its full number of attempts again."""
    extra = {"attempts": 0} if fresh_attempts else {}
    return Document.objects.filter(pk__in=list(document_ids)).update(
        status=DocumentStatus.QUEUED, error_code="", error_message="", status_changed_at=timezone.now(),
        lease_token="", lease_expires_at=None, worker="", **extra,
    )


def claim(*, document_id: int, worker: str | None = None) -> Claim | None:
    """QUEUED → PARSING with a fresh token and lease; None when another run has it (or it is
    not queued any more)."""
    now = timezone.now()
    token = str(uuid.uuid4())
    worker = worker or worker_name()
    with transaction.atomic():
        claimed = Document.objects.filter(pk=document_id, status=DocumentStatus.QUEUED).update(
            status=DocumentStatus.PARSING, status_changed_at=now, error_code="", error_message="",
            attempts=F("attempts") + 1, lease_token=token, lease_expires_at=now + timedelta(seconds=lease_seconds()),
            heartbeat_at=now, worker=worker,
        )
        if not claimed:
            return None
        attempt = Document.objects.filter(pk=document_id).values_list("attempts", flat=True).get()
    return Claim(document_id=document_id, token=token, worker=worker, attempt=attempt)


def held(claim: Claim):
    """The document's row, as a queryset, while the claim holds (for conditional writes)."""
    return Document.objects.filter(pk=claim.document_id, lease_token=claim.token)


def heartbeat(claim: Claim) -> bool:
    """Extend the lease; False when the claim is gone."""
    now = timezone.now()
    return bool(held(claim).update(lease_expires_at=now + timedelta(seconds=lease_seconds()), heartbeat_at=now))


def advance(claim: Claim, status: str) -> None:
    """PARSING → INDEXING under the claim."""
    if status not in IN_PROGRESS:
        raise ValueError(f"{status} is not an in-progress status")
    if not held(claim).update(status=status, status_changed_at=timezone.now()):
        raise _gone(claim)


def lock(claim: Claim) -> Document:
    """Lock the row inside the caller's transaction, or raise when the claim is gone."""
    document = held(claim).select_for_update().first()
    if document is None:
        raise _gone(claim)
    return document


def finish(claim: Claim, **fields) -> None:
    """→ READY under the claim (inside the caller's transaction); releases the claim."""
    if not held(claim).update(
        status=DocumentStatus.READY, status_changed_at=timezone.now(), error_code="", error_message="",
        lease_token="", lease_expires_at=None, **fields,
    ):
        raise _gone(claim)


def fail(claim: Claim, *, code: str, message: str) -> bool:
    """→ FAILED under the claim (inside the caller's transaction); False when the claim is gone
    (another run owns the document now: its outcome counts, not this one's)."""
    return bool(held(claim).update(
        status=DocumentStatus.FAILED, status_changed_at=timezone.now(), error_code=code[:64],
        error_message=message, lease_token="", lease_expires_at=None,
    ))


def retry_later(claim: Claim, *, code: str, message: str) -> bool:
    """→ QUEUED with the reason, releasing the claim (a transient failure; a new task follows)."""
    return bool(held(claim).update(
        status=DocumentStatus.QUEUED, status_changed_at=timezone.now(), error_code=code[:64],
        error_message=message, lease_token="", lease_expires_at=None,
    ))


def give_up(*, document_ids: Sequence[int], code: str, message: str) -> int:
    """→ FAILED for documents whose runs keep dying (no claim: the sweep decides)."""
    return Document.objects.filter(pk__in=list(document_ids), status__in=IN_PROGRESS).update(
        status=DocumentStatus.FAILED, status_changed_at=timezone.now(), error_code=code[:64],
        error_message=message, lease_token="", lease_expires_at=None,
    )


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


def _gone(claim: Claim) -> Exception:
    if Document.objects.filter(pk=claim.document_id).exists():
        return LeaseLost(f"document {claim.document_id}: the claim of {claim.worker} is gone")
    return Document.DoesNotExist(f"document {claim.document_id} was deleted")
