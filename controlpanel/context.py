"""Template context: the user's role flags for navigation (no logic beyond that)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from controlpanel.roles import Role, has_role, role_of


def roles(request: HttpRequest) -> dict[str, Any]:
    user = getattr(request, "user", None)
    held = role_of(user)
    return {
        "user_role": held.label if held else "",
        "is_operator": has_role(user, Role.OPERATOR),
        "is_admin": has_role(user, Role.ADMIN),
    }
