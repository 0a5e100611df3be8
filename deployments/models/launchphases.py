"""The phases of an engine's start (downloading, loading weights, ... ready), one row each.

Written by the host worker (deployments.host.launchphases) from the engine's log lines
(deployments.engines.phases); read by the pages (deployments.lifecycle.launchphases)."""

from __future__ import annotations

from django.db import models

from .core import Deployment


class Phase(models.TextChoices):
    """The steps of an engine's start, in order (deployments.engines.phases recognises them)."""

    DOWNLOADING = "downloading", "Downloading weights"
    # Not an engine's own step: the launch waits while its host still prepares the engine
    # (deployments.host.prepare); shown only by a start that waited.
    ENGINE = "engine", "Waiting for the engine to be prepared"
    LOADING = "loading", "Loading weights"
    PROFILING = "profiling", "Profiling memory"
    CUDA_GRAPHS = "cuda_graphs", "Capturing CUDA graphs"
    WARMING_UP = "warming_up", "Warming up"
    READY = "ready", "Ready"


class LaunchPhase(models.Model):
    """One step of one engine start: when it began, when it ended, how far it got. Kept after
    the deployment ends, so a later launch of the same model can say how long to expect."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="phases")
    attempt = models.PositiveIntegerField(default=0, help_text="restart_count of that start")
    phase = models.CharField(max_length=20, choices=Phase.choices)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    done = models.BigIntegerField(default=0, help_text="bytes or shards done")
    total = models.BigIntegerField(default=0, help_text="bytes or shards in all; 0: unknown")
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "attempt", "phase"], name="launch_phase_once_per_start"
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id}#{self.attempt} {self.phase}"

    @property
    def duration_s(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()
