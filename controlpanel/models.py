"""The audit trail: append-only rows of who did what, from where."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NoReturn

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from controlpanel.auditchain.append import hold_chain, seal
from controlpanel.auditchain.forward import forward_on_commit


class AuditImmutableError(Exception):
    """Audit rows are written once and never changed or removed."""


class AuditQuerySet(models.QuerySet["AuditEvent"]):
    def update(self, **kwargs: Any) -> NoReturn:
        raise AuditImmutableError("audit events cannot be updated")

    def delete(self) -> NoReturn:
        raise AuditImmutableError("audit events cannot be deleted")

    def bulk_create(
        self, objs: Iterable[AuditEvent], *args: Any, **kwargs: Any
    ) -> list[AuditEvent]:
        """Insert new rows at the end of the hash chain, in the order given."""
        rows = list(objs)
        if any(row.pk is not None for row in rows):
            raise AuditImmutableError("audit events cannot be updated")
        with transaction.atomic(using=self.db, savepoint=False):
            hold_chain(self.db)
            seal(rows, using=self.db)
            created = super().bulk_create(rows, *args, **kwargs)
            forward_on_commit(created, using=self.db)
        return created


class AuditEvent(models.Model):
    """One audited action (who, what, on which target, with which detail), written once by
    the services, tasks and the gateway through ``controlpanel.audit`` and sealed into the hash
    chain in the writer's transaction (``auditchain.append``); never updated nor deleted."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    actor_name = models.CharField(max_length=150, blank=True)
    action = models.CharField(max_length=64, db_index=True)
    target_type = models.CharField(max_length=64, blank=True, db_index=True)
    target_id = models.CharField(max_length=64, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    # Set when the row joins the chain (append.seal), under the chain's lock.
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    # The hash chain: position, the previous row's hash, this row's hash (auditchain).
    seq = models.BigIntegerField(null=True, unique=True, editable=False)
    prev_hash = models.CharField(max_length=64, blank=True, editable=False)
    row_hash = models.CharField(max_length=64, blank=True, editable=False)
    # The row hash's MAC under the chain's key (auditchain.keyed); "" on rows written before.
    row_mac = models.CharField(max_length=64, blank=True, editable=False, db_default="")

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor_name or '-'} {self.action}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise AuditImmutableError("audit events cannot be updated")
        type(self).objects.db_manager(kwargs.get("using")).bulk_create([self])

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AuditImmutableError("audit events cannot be deleted")


class AuditCheckpoint(models.Model):
    """The last verification of the chain (one row): the audit page re-verifies only the rows
    after the last good position, and a chain now shorter than it was is a deleted tail."""

    good_seq = models.BigIntegerField(default=0)  # verified through this position
    good_hash = models.CharField(max_length=64, blank=True)
    rows_checked = models.BigIntegerField(default=0)  # by the verification that ran last
    checked_at = models.DateTimeField(null=True, blank=True)
    full_checked_at = models.DateTimeField(null=True, blank=True)  # from the first row
    problem = models.TextField(blank=True)  # "" when the last verification passed
    problem_row_id = models.BigIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"audit chain through #{self.good_seq}"
