"""Create the first admin account once; later runs leave existing accounts alone."""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from controlpanel.audit import audit_record
from controlpanel.roles import Role


class Command(BaseCommand):
    help = "Create an admin account on first start (password from SHARDBOARD_ADMIN_PASSWORD)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--username", default=os.environ.get("SHARDBOARD_ADMIN_USER", "admin"))

    @transaction.atomic
    def handle(self, *args: Any, username: str, **options: Any) -> None:
        users = get_user_model()
        if users.objects.filter(is_superuser=True).exists():
            return
        password = os.environ.get("SHARDBOARD_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
        user = users.objects.create_superuser(username=username, email="", password=password)
        user.groups.add(Group.objects.get_or_create(name=Role.ADMIN.value)[0])
        audit_record(
            actor=None,
            action="user.create_admin",
            target_type="user",
            target_id=user.pk,
            detail={"username": username},
        )
        if "SHARDBOARD_ADMIN_PASSWORD" in os.environ:
            self.stdout.write(
                f"Created admin account {username!r} (password from SHARDBOARD_ADMIN_PASSWORD)."
            )
        else:
            self.stdout.write(f"Created admin account {username!r} with password: {password}")
            self.stdout.write("This password is shown once. Change it under /admin/.")
