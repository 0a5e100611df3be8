"""A benchmark run of a deployment: its workload, the layout it measured, its figures per level.

State changes go through `BenchmarkRun.transition` (compare-and-set), so a duplicate task, a
cancel and the end of the run cannot overwrite one another.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from deployments.models import Deployment


class RunStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ENDED = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})
_NEXT: dict[str, frozenset[str]] = {
    RunStatus.PENDING: frozenset({RunStatus.RUNNING, RunStatus.FAILED, RunStatus.CANCELLED}),
    RunStatus.RUNNING: frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED}),
}


class BenchmarkRun(models.Model):
    """One benchmark of a running deployment: created by ``benchmarks.services.run_start``
    (web, with its audit row); its status, progress and figures per level written by the host
    worker that runs it (``benchmarks.host.run``); a cancel only sets ``cancel_requested``."""

    deployment = models.ForeignKey(
        Deployment, on_delete=models.CASCADE, related_name="benchmark_runs"
    )
    label = models.CharField(max_length=100, blank=True)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.PENDING)
    workload = models.JSONField(default=dict)
    layout = models.JSONField(default=dict, help_text="the deployment as it was measured")
    levels = models.JSONField(default=list, blank=True, help_text="figures per level")
    progress = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    cancel_requested = models.BooleanField(default=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="benchmark_runs"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"benchmark {self.pk} of {self.deployment_id} ({self.status})"

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @property
    def title(self) -> str:
        return self.label or f"run {self.pk}"

    def transition(self, new: RunStatus, **fields: Any) -> bool:
        """Compare-and-set from the status this instance holds; False if it moved meanwhile."""
        if new not in _NEXT.get(self.status, frozenset()):
            return False
        changed: dict[str, Any] = {"status": new, **fields}
        if new in ENDED:
            changed.setdefault("finished_at", timezone.now())
        if new == RunStatus.RUNNING:
            changed.setdefault("started_at", timezone.now())
        if BenchmarkRun.objects.filter(pk=self.pk, status=self.status).update(**changed) != 1:
            return False
        for key, value in changed.items():
            setattr(self, key, value)
        return True
