"""A deployment's scaling policy: the bounds and the target the autoscaler follows."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from .core import Deployment


class ScalingPolicy(models.Model):
    """On the first replica's row (the deployment as the pages show it). At least one target:
    a latency SLO (p90 TTFT and/or TPOT) or a load target (waiting per replica, KV usage)."""

    deployment = models.OneToOneField(
        Deployment, on_delete=models.CASCADE, related_name="scaling_policy"
    )
    enabled = models.BooleanField(default=True)
    min_replicas = models.PositiveSmallIntegerField(
        default=1, help_text="0: the controller stops at 1; below is the idle sleep's job"
    )
    max_replicas = models.PositiveSmallIntegerField(default=4)
    ttft_p90_s = models.FloatField(null=True, blank=True, help_text="p90 time to first token SLO")
    tpot_p90_s = models.FloatField(null=True, blank=True, help_text="p90 time per output token")
    waiting_per_replica = models.FloatField(null=True, blank=True)
    kv_usage = models.FloatField(null=True, blank=True, help_text="KV-cache usage, 0..1")
    up_after_s = models.FloatField(default=15.0, help_text="a breach held this long scales up")
    down_after_s = models.FloatField(default=60.0, help_text="calm this long scales down one")
    # The controller acts as the operator who set the policy: the same role, team and quota
    # checks as that operator's own Scale click.
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    last_change_at = models.DateTimeField(null=True, blank=True)
    last_decision = models.TextField(blank=True, help_text="the latest decision or refusal")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(max_replicas__gte=1) & Q(max_replicas__gte=models.F("min_replicas")),
                name="scaling_policy_bounds",
            ),
            models.CheckConstraint(
                condition=Q(ttft_p90_s__isnull=False)
                | Q(tpot_p90_s__isnull=False)
                | Q(waiting_per_replica__isnull=False)
                | Q(kv_usage__isnull=False),
                name="scaling_policy_has_target",
            ),
        ]

    def __str__(self) -> str:
        return f"policy of {self.deployment_id}: {self.min_replicas}..{self.max_replicas}"
