"""A team: its members, and the quotas its deployments are held to."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Team(models.Model):
    """A team and its quotas, managed by admins in the Django admin; read by the launch's
    quota check (``teams.quota``), the host workers' monthly enforcement
    (``teams.host.enforcement``) and the Usage page."""

    name = models.SlugField(max_length=63, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="teams", blank=True)
    max_gpus = models.PositiveIntegerField(
        null=True, blank=True, help_text="GPUs its deployments hold at once; empty: no limit"
    )
    gpu_hours_per_month = models.FloatField(
        null=True, blank=True, help_text="GPU-hours per calendar month (UTC); empty: no limit"
    )
    stop_over_monthly = models.BooleanField(
        default=False,
        help_text="stop its running deployments once the month's GPU-hours are used up "
        "(otherwise they are only flagged)",
    )
    # Space-separated model names in /v1/ (deployments or LoRA adapters); blank: any.
    allowed_models = models.CharField(
        max_length=2000,
        blank=True,
        help_text="model names (deployments or LoRA adapters) its members may use in /v1/, "
        "separated by spaces; empty: any",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_hours_per_month__isnull=True) | Q(gpu_hours_per_month__gte=0),
                name="team_gpu_hours_not_negative",
            )
        ]

    def __str__(self) -> str:
        return self.name
