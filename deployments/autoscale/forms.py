"""The scaling policy form on the deployment page (the API takes the same fields)."""

from __future__ import annotations

from typing import Any

from django import forms

from deployments.autoscale.services import PolicySettings
from deployments.lifecycle.policy_form import MIN_ZERO_HELP, PolicyFields, settings_of

# Required here, with these first values: the page sets a whole policy at once.
REQUIRED = {"min_replicas": 1, "max_replicas": 4, "up_after_s": 15, "down_after_s": 60}


class PolicyForm(PolicyFields):
    field_order = ["min_replicas", "max_replicas"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, initial in REQUIRED.items():
            field = self.fields[name]
            field.required, field.initial, field.help_text = True, initial, ""
        self.fields["min_replicas"].help_text = MIN_ZERO_HELP

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.errors and (problem := settings_of(data).problem()):
            raise forms.ValidationError(problem)
        return data

    def policy_settings(self) -> PolicySettings:
        return settings_of(self.cleaned_data)
