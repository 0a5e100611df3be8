"""LoRA adapters loaded into a running vLLM deployment: one row per adapter on the deployment
(its first replica's row), and one per replica that holds it (the gateway routes an adapter's
requests to those alone)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from .core import Deployment


class AdapterStatus(models.TextChoices):
    """An adapter on a deployment: wanted (loading, loaded), going (unloading), gone."""

    LOADING = "loading", "Loading"
    LOADED = "loaded", "Loaded"
    UNLOADING = "unloading", "Unloading"
    UNLOADED = "unloaded", "Unloaded"
    FAILED = "failed", "Failed"


# Wanted on the deployment: its replicas load it, a replica started later too. Holds the name.
WANTED = frozenset({AdapterStatus.LOADING, AdapterStatus.LOADED})
HOLDS_NAME = WANTED | {AdapterStatus.UNLOADING}


class DeploymentAdapter(models.Model):
    """An adapter asked for on a deployment; its name is a model name in the gateway."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="adapters")
    name = models.SlugField(max_length=63, help_text="the model name requests use")
    source = models.CharField(max_length=300, help_text="a Hub id or local:<root>/<path>")
    revision = models.CharField(max_length=100, blank=True)
    base_model = models.CharField(max_length=300, blank=True)
    rank = models.PositiveIntegerField()
    alpha = models.FloatField()
    target_modules = models.JSONField(default=list)
    size_bytes = models.BigIntegerField(default=0)
    status = models.CharField(
        max_length=20, choices=AdapterStatus.choices, default=AdapterStatus.LOADING
    )
    error = models.TextField(blank=True)
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    unloaded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["name"],
                condition=Q(status__in=["loading", "loaded", "unloading"]),
                name="adapter_active_name_unique",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} on {self.deployment_id} ({self.status})"


class AdapterReplica(models.Model):
    """One replica's copy of an adapter: what its engine said when asked to load it."""

    adapter = models.ForeignKey(
        DeploymentAdapter, on_delete=models.CASCADE, related_name="placements"
    )
    replica = models.ForeignKey(
        Deployment, on_delete=models.CASCADE, related_name="adapter_placements"
    )
    status = models.CharField(
        max_length=20, choices=AdapterStatus.choices, default=AdapterStatus.LOADING
    )
    error = models.TextField(blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["adapter", "replica"], name="adapter_replica_unique")
        ]

    def __str__(self) -> str:
        return f"{self.adapter_id} on replica {self.replica_id}: {self.status}"
