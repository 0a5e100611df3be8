"""A scaling policy's form fields, shared by the launch form's Autoscaling section and the
deployment page's policy form. Blank here; the page's form makes its bounds and windows
required (deployments.autoscale.forms)."""

from __future__ import annotations

from typing import Any

from django import forms

from deployments.lifecycle.policy import MAX_REPLICAS, POLICY_FIELDS, PolicySettings

MIN_ZERO_HELP = (
    "0 is allowed: the autoscaler never goes below 1 replica; below 1 is the idle sleep's job "
    "(scale to zero after idle)."
)


class PolicyFields(forms.Form):
    max_replicas = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_REPLICAS,
        label="Max replicas",
        help_text="blank: no autoscaling, the replica count stays as launched",
    )
    min_replicas = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=MAX_REPLICAS,
        label="Min replicas",
        help_text=f"blank: the replicas launched. {MIN_ZERO_HELP}",
    )
    ttft_p90_s = forms.FloatField(required=False, min_value=0.001, label="p90 TTFT SLO (s)")
    tpot_p90_s = forms.FloatField(required=False, min_value=0.0001, label="p90 TPOT SLO (s)")
    waiting_per_replica = forms.FloatField(
        required=False, min_value=0.01, label="Waiting requests a replica"
    )
    kv_usage = forms.FloatField(
        required=False, min_value=0.01, max_value=1, label="KV-cache usage (0–1)"
    )
    up_after_s = forms.FloatField(
        required=False, min_value=1, max_value=3600, label="Up after (s)", help_text="blank: 15"
    )
    down_after_s = forms.FloatField(
        required=False, min_value=1, max_value=86400, label="Down after (s)", help_text="blank: 60"
    )

    @property
    def policy_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name in POLICY_FIELDS]

    @property
    def policy_given(self) -> bool:
        """Whether a policy field was filled in: the launch page then shows its section open."""
        return self.is_bound and any(self.data.get(k) not in (None, "") for k in POLICY_FIELDS)

    @property
    def other_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name not in POLICY_FIELDS]


def settings_of(data: dict[str, Any], *, min_replicas: int = 1) -> PolicySettings:
    """The fields given (a blank one takes PolicySettings' default; a blank min, `min_replicas`)."""
    given: dict[str, Any] = {k: data[k] for k in POLICY_FIELDS if data.get(k) is not None}
    return PolicySettings(**{"min_replicas": min_replicas, **given})
