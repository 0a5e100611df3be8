"""The scaling policy form on the deployment page (the API takes the same fields)."""

from __future__ import annotations

from typing import Any

from django import forms

from deployments.autoscale.services import PolicySettings
from deployments.lifecycle.scaling import MAX_REPLICAS


class PolicyForm(forms.Form):
    min_replicas = forms.IntegerField(
        min_value=0,
        max_value=MAX_REPLICAS,
        initial=1,
        help_text="0 is allowed: the autoscaler never goes below 1 replica; below 1 is the idle "
        "sleep's job (scale to zero after idle).",
    )
    max_replicas = forms.IntegerField(min_value=1, max_value=MAX_REPLICAS, initial=4)
    ttft_p90_s = forms.FloatField(required=False, min_value=0.001, label="p90 TTFT SLO (s)")
    tpot_p90_s = forms.FloatField(required=False, min_value=0.0001, label="p90 TPOT SLO (s)")
    waiting_per_replica = forms.FloatField(
        required=False, min_value=0.01, label="Waiting requests a replica"
    )
    kv_usage = forms.FloatField(
        required=False, min_value=0.01, max_value=1, label="KV-cache usage (0–1)"
    )
    up_after_s = forms.FloatField(min_value=1, max_value=3600, initial=15, label="Up after (s)")
    down_after_s = forms.FloatField(
        min_value=1, max_value=86400, initial=60, label="Down after (s)"
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors and (problem := self.settings(data).problem()):
            raise forms.ValidationError(problem)
        return data

    @staticmethod
    def settings(data: dict[str, Any]) -> PolicySettings:
        given: dict[str, Any] = {
            k: data[k] for k in PolicySettings.__dataclass_fields__ if data.get(k) is not None
        }
        return PolicySettings(**given)

    def policy_settings(self) -> PolicySettings:
        return self.settings(self.cleaned_data)
