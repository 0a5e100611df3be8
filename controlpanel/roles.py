"""Roles are Django groups, ordered: viewer < operator < admin. Superusers are admins.

One helper answers "may this user act as ROLE?" for views (`role_required`), consumers
(`has_role`) and tasks (`has_role` on the loaded user).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import models
from django.http import HttpRequest, HttpResponseBase

View = Callable[..., HttpResponseBase]


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    OPERATOR = "operator", "Operator"
    ADMIN = "admin", "Admin"


_RANK = {Role.VIEWER: 1, Role.OPERATOR: 2, Role.ADMIN: 3}


def role_of(user: Any) -> Role | None:
    """The highest role the user holds, or None for anonymous or role-less users."""
    if not getattr(user, "is_authenticated", False) or not user.is_active:
        return None
    if user.is_superuser:
        return Role.ADMIN
    names = set(user.groups.values_list("name", flat=True))
    held = [role for role in _RANK if role.value in names]
    return max(held, key=_RANK.__getitem__) if held else None


def has_role(user: Any, role: Role) -> bool:
    held = role_of(user)
    return held is not None and _RANK[held] >= _RANK[role]


def role_required(role: Role) -> Callable[[View], View]:
    """View decorator: anonymous users go to the login page, too-low roles get 403."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not has_role(request.user, role):
                raise PermissionDenied(f"This page needs the {role.label} role.")
            return view(request, *args, **kwargs)

        return wrapper

    return decorate
