"""Model weights on the hosts: downloads, the Hub cache's contents and disk."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from monitoring.models import Host

from .core import Deployment


class DownloadStatus(models.TextChoices):
    """Where a `ModelDownload` is; done, failed and cancelled are final."""

    QUEUED = "queued", "Queued"
    DOWNLOADING = "downloading", "Downloading"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class ModelDownload(models.Model):
    """Weights fetched from the Hub onto one host: for a launch, or pre-fetched by an operator."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="downloads")
    repo_id = models.CharField(max_length=200)
    revision = models.CharField(max_length=100, blank=True, help_text="as asked; '' = main")
    commit = models.CharField(max_length=64, blank=True, help_text="the resolved commit")
    deployment = models.ForeignKey(
        Deployment, on_delete=models.SET_NULL, null=True, blank=True, related_name="downloads"
    )
    status = models.CharField(
        max_length=20, choices=DownloadStatus.choices, default=DownloadStatus.QUEUED
    )
    cancel_requested = models.BooleanField(default=False)
    hub_token_sealed = models.TextField(blank=True, help_text="a pre-fetch's token (sealed.py)")
    bytes_done = models.BigIntegerField(default=0)
    bytes_total = models.BigIntegerField(default=0)
    rate_bps = models.FloatField(default=0)
    files = models.JSONField(default=dict, blank=True, help_text="file -> [done, total]")
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="model_downloads"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.revision or 'main'} on {self.host_id} ({self.status})"


class CachedModel(models.Model):
    """A model revision in a host's Hub cache, as its host worker last scanned it."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="cached_models")
    repo_id = models.CharField(max_length=200)
    commit = models.CharField(max_length=64)
    refs = models.JSONField(default=list, blank=True)
    size_bytes = models.BigIntegerField(default=0)
    files = models.PositiveIntegerField(default=0)
    complete = models.BooleanField(
        default=False, help_text="every file a download of it listed is there"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    snapshot_path = models.CharField(max_length=500, blank=True)
    scanned_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["host__name", "repo_id", "commit"]
        constraints = [
            models.UniqueConstraint(
                fields=["host", "repo_id", "commit"], name="cached_model_once_per_host"
            )
        ]

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.commit[:8]} on {self.host_id}"

    @property
    def org(self) -> str:
        return self.repo_id.partition("/")[0]

    @property
    def name(self) -> str:
        return self.repo_id.partition("/")[2]


class HostDisk(models.Model):
    """The Hub cache's disk on a host: where it is and how much is free (host worker inventory)."""

    host = models.OneToOneField(Host, on_delete=models.CASCADE, related_name="disk")
    cache_dir = models.CharField(max_length=500)
    free_bytes = models.BigIntegerField(default=0)
    total_bytes = models.BigIntegerField(default=0)
    scanned_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.host_id}: {self.free_bytes} free"
