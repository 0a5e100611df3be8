"""One row per engine start: what the engine printed beside what the plan predicted, the
fleet's own cases for calibrating the planner.

Written by the host worker (deployments.host.calibration) from the engine's start-up lines
(deployments.engines.startup_figures); read by the Planner accuracy page and
`manage.py export_planner_cases`."""

from __future__ import annotations

from django.db import models

from .core import Deployment


class Outcome(models.TextChoices):
    OK = "ok", "started"
    FAILED = "failed", "refused for memory"


class StartObservation(models.Model):
    """An engine start's figures: the plan's per GPU (rank 0's), and the engine's own; a
    measured figure is null where that engine does not print it."""

    deployment = models.ForeignKey(
        Deployment, on_delete=models.CASCADE, related_name="start_observations"
    )
    attempt = models.PositiveIntegerField(default=0, help_text="restart_count of that start")
    recorded_at = models.DateTimeField()
    outcome = models.CharField(max_length=10, choices=Outcome.choices, default=Outcome.OK)
    failure = models.CharField(max_length=300, blank=True)
    engine = models.CharField(max_length=20)
    engine_version = models.CharField(max_length=40, blank=True)
    model_ref = models.CharField(max_length=300, blank=True)
    model_family = models.CharField(max_length=40, blank=True, help_text="planning's family")
    gpu_model = models.CharField(max_length=100, blank=True, help_text="'' on CPU")
    gpu_total_bytes = models.BigIntegerField(default=0)
    tensor_parallel_size = models.PositiveSmallIntegerField(default=1)
    pipeline_parallel_size = models.PositiveSmallIntegerField(default=1)
    max_model_len = models.PositiveIntegerField(null=True, blank=True)
    gpu_memory_utilization = models.FloatField(null=True, blank=True)
    dtype = models.CharField(max_length=20, blank=True)
    quantization = models.CharField(max_length=30, blank=True)
    kv_cache_dtype = models.CharField(max_length=20, blank=True)
    block_size = models.PositiveIntegerField(null=True, blank=True)
    planned_fits = models.BooleanField(default=True)
    planned_weights_bytes = models.BigIntegerField(null=True, blank=True)
    planned_kv_tokens = models.BigIntegerField(null=True, blank=True)
    planned_kv_bytes = models.BigIntegerField(null=True, blank=True)
    planned_cuda_graph_bytes = models.BigIntegerField(null=True, blank=True)
    planned_correction_bytes = models.BigIntegerField(
        default=0, help_text="the learned correction the plan applied per GPU (planning)"
    )
    measured_weights_bytes = models.BigIntegerField(null=True, blank=True)
    measured_kv_tokens = models.BigIntegerField(null=True, blank=True)
    measured_kv_bytes = models.BigIntegerField(null=True, blank=True)
    measured_cuda_graph_bytes = models.BigIntegerField(null=True, blank=True)
    measured_weight_tensors = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-recorded_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "attempt"], name="start_observation_once_per_start"
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id}#{self.attempt} {self.engine} {self.outcome}"
