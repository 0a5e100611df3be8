from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin

from teams.models import Team

if TYPE_CHECKING:  # ModelAdmin is generic only in django-stubs
    _TeamAdminBase = admin.ModelAdmin[Team]
else:
    _TeamAdminBase = admin.ModelAdmin


@admin.register(Team)
class TeamAdmin(_TeamAdminBase):
    list_display = ("name", "max_gpus", "gpu_hours_per_month", "stop_over_monthly")
    search_fields = ("name", "members__username")
    filter_horizontal = ("members",)
