"""The engines each host has prepared or is preparing (the llama-server build, the vLLM install,
the transformers engine): one row per host and engine.

Written by that host's worker (deployments.host.prepare), which runs the project's scripts and
reads their progress; read by the pages (deployments.lifecycle.engineprep) and by a launch,
which waits for an engine still being prepared or is refused one that failed."""

from __future__ import annotations

from django.db import models

from monitoring.models import Host

from .core import Engine


class PrepState(models.TextChoices):
    PREPARING = "preparing", "Preparing"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"
    ABSENT = "absent", "Not installed"  # and not being prepared: this host does not prepare it


class EnginePrep(models.Model):
    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="engine_preps")
    engine = models.CharField(max_length=20, choices=Engine.choices)
    state = models.CharField(max_length=20, choices=PrepState.choices)
    phase = models.CharField(max_length=200, blank=True, help_text="the script's latest step")
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0, help_text="0: not known yet")
    unit = models.CharField(max_length=20, blank=True, help_text="'%' (a build) or 'packages'")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    attempt = models.PositiveIntegerField(default=0, help_text="preparations run, retries included")
    log_tail = models.TextField(blank=True, help_text="the script's last lines")
    error = models.TextField(blank=True)
    executable = models.CharField(max_length=500, blank=True)
    note = models.CharField(max_length=300, blank=True, help_text="why it is as it is")

    class Meta:
        ordering = ["host__name", "engine"]
        constraints = [
            models.UniqueConstraint(fields=["host", "engine"], name="engine_prep_once_per_host")
        ]

    def __str__(self) -> str:
        return f"{self.engine} on {self.host_id}: {self.state}"

    @property
    def percent(self) -> int | None:
        return min(100, round(100 * self.done / self.total)) if self.total else None

    @property
    def progress_text(self) -> str:
        """How far the script got: "45 %", "12 of 146 packages", "12 packages so far"."""
        if self.state != PrepState.PREPARING or not self.unit:
            return ""
        if self.unit == "%":
            return f"{self.done} %"
        if self.total:
            return f"{self.done} of {self.total} {self.unit}"
        return f"{self.done} {self.unit} so far"
