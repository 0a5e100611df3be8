"""Persona users: viewer, operator, admin, outsider."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

PASSWORD = "correct-horse-battery-staple"


def make_user(username: str, role: str | None) -> Any:
    user = get_user_model().objects.create_user(username=username, password=PASSWORD)
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user
