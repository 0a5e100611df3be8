"""Admin site: the audit list (read-only, filterable) for admins."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest

from controlpanel.models import AuditEvent
from controlpanel.roles import Role, has_role

admin.site.site_header = "Shardboard administration"

if TYPE_CHECKING:  # ModelAdmin is generic only in django-stubs
    _AuditEventAdminBase = admin.ModelAdmin[AuditEvent]
else:
    _AuditEventAdminBase = admin.ModelAdmin


@admin.register(AuditEvent)
class AuditEventAdmin(_AuditEventAdminBase):
    list_display = ("created_at", "actor_name", "action", "target_type", "target_id", "client_ip")
    list_filter = ("action", "target_type", ("created_at", admin.DateFieldListFilter))
    search_fields = ("actor_name", "action", "target_id")
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return has_role(request.user, Role.ADMIN)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
