"""A deployment's Ray node on each host it spans."""

from __future__ import annotations

from django.db import models

from monitoring.models import Host

from .core import Deployment


class RayNode(models.Model):
    """One host's Ray node of a deployment that spans hosts: the head on the deployment's own
    host (which also runs the engine), a worker on each other host. The host worker of
    ``host`` starts, watches and stops it; ``state`` tells the lead's worker how it went."""

    class Role(models.TextChoices):
        """The head runs the engine's driver; workers only join."""

        HEAD = "head", "Head"
        WORKER = "worker", "Worker"

    class State(models.TextChoices):
        """The node process's life, as its host worker last saw it."""

        PENDING = "pending", "Pending"
        RUNNING = "running", "Running"
        EXITED = "exited", "Exited"  # ended on its own: the deployment fails with the reason
        STOPPED = "stopped", "Stopped"

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="ray_nodes")
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="ray_nodes")
    role = models.CharField(max_length=10, choices=Role.choices)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    num_gpus = models.PositiveSmallIntegerField(default=0)
    gpu_indices = models.JSONField(default=list, blank=True)
    address = models.CharField(max_length=100, blank=True, help_text="the node's IP for Ray")
    port = models.PositiveIntegerField(null=True, blank=True, help_text="first of its ports")
    pid = models.IntegerField(null=True, blank=True)
    pgid = models.IntegerField(null=True, blank=True)
    process_started_at = models.FloatField(null=True, blank=True)
    log_path = models.CharField(max_length=500, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["deployment_id", "role", "id"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "host"], name="ray_node_one_per_host")
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id} {self.role} on {self.host_id} ({self.state})"

    @property
    def gcs_address(self) -> str:
        """``address:port`` of the head's GCS: what workers join and the engine connects to."""
        return f"{self.address}:{self.port}"
