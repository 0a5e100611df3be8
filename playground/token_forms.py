"""The Tokens page's form: a name, the scopes, and an optional lifetime in days."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import forms
from django.utils import timezone

from playground.models import Scope

MAX_DAYS = 3650


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100)
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, widget=forms.CheckboxSelectMultiple, initial=[Scope.READ]
    )
    expires_in_days = forms.IntegerField(
        min_value=1,
        max_value=MAX_DAYS,
        required=False,
        label="Expires after (days)",
        help_text="blank: never",
    )

    def expires_at(self) -> datetime | None:
        days = self.cleaned_data["expires_in_days"]
        return None if days is None else timezone.now() + timedelta(days=days)
