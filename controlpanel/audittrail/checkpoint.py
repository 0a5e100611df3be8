"""The chain's standing for the audit page, cheaply: the last verification is kept (one row),
and a page re-verifies only the rows written since the last good position, at most once per
RECHECK_S. `manage.py audit_verify` walks the whole chain and records its result here too."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction

from controlpanel.audittrail.verify import Verification, verify_chain
from controlpanel.models import AuditCheckpoint

RECHECK_S = 10.0


@dataclass(frozen=True, slots=True)
class ChainStatus:
    ok: bool
    through_seq: int
    checked_at: datetime | None
    full_checked_at: datetime | None
    problem: str
    problem_row_id: int | None


def chain_status(*, now: datetime) -> ChainStatus:
    """The chain's standing, re-verified from the last good row when older than RECHECK_S."""
    checkpoint = AuditCheckpoint.objects.filter(pk=1).first()
    if checkpoint is None or _stale(checkpoint, now):
        after = (checkpoint.good_seq, checkpoint.good_hash) if checkpoint else None
        known = checkpoint.good_seq if checkpoint else 0
        checkpoint = record(verify_chain(after=after, known_head_seq=known), now=now, full=False)
    return _status(checkpoint)


def _stale(checkpoint: AuditCheckpoint, now: datetime) -> bool:
    checked_at = checkpoint.checked_at
    return checked_at is None or now - checked_at > timedelta(seconds=RECHECK_S)


def verify_and_record(*, now: datetime) -> Verification:
    """A full walk from the first row (audit_verify), kept as the page's standing."""
    known = AuditCheckpoint.objects.filter(pk=1).values_list("good_seq", flat=True).first()
    result = verify_chain(known_head_seq=known or 0)
    record(result, now=now, full=True)
    return result


def record(result: Verification, *, now: datetime, full: bool) -> AuditCheckpoint:
    with transaction.atomic():
        checkpoint, _ = AuditCheckpoint.objects.select_for_update().get_or_create(pk=1)
        if result.ok and result.head_seq >= checkpoint.good_seq:
            checkpoint.good_seq, checkpoint.good_hash = result.head_seq, result.head_hash
        checkpoint.rows_checked = result.rows_checked
        checkpoint.checked_at = now
        if full:
            checkpoint.full_checked_at = now
        if result.broken is not None:
            checkpoint.problem, checkpoint.problem_row_id = (
                result.broken.message,
                result.broken.row_id,
            )
        elif full:  # rows after the good position passing says nothing of a break before it
            checkpoint.problem, checkpoint.problem_row_id = "", None
        checkpoint.save()
    return checkpoint


def _status(checkpoint: AuditCheckpoint) -> ChainStatus:
    return ChainStatus(
        ok=not checkpoint.problem,
        through_seq=checkpoint.good_seq,
        checked_at=checkpoint.checked_at,
        full_checked_at=checkpoint.full_checked_at,
        problem=checkpoint.problem,
        problem_row_id=checkpoint.problem_row_id,
    )
