"""Django's auth signals record log-ins, log-outs and failed log-ins; a change to a user's
roles or account tells their open websockets to check their role again."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver

from controlpanel.audit import audit_record
from controlpanel.consumers import access_group

log = logging.getLogger(__name__)


@receiver(user_logged_in)
def _logged_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    audit_record(
        actor=user, action="auth.login", target_type="user", target_id=user.pk, request=request
    )


@receiver(user_logged_out)
def _logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is not None:
        audit_record(
            actor=user, action="auth.logout", target_type="user", target_id=user.pk, request=request
        )


@receiver(user_login_failed)
def _login_failed(
    sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any
) -> None:
    username = str(credentials.get("username", ""))[:150]
    audit_record(
        actor=None, action="auth.login_failed", detail={"username": username}, request=request
    )


# --- open websockets follow a change of roles ---------------------------------------------------

User = get_user_model()


@receiver(m2m_changed, sender=User.groups.through)
def _groups_changed(
    sender: Any, instance: Any, action: str, reverse: bool, pk_set: set[int] | None, **kwargs: Any
) -> None:
    if reverse and action == "pre_clear":  # group.user_set.clear(): who was in it, asked before
        instance._members_before_clear = set(instance.user_set.values_list("pk", flat=True))
    if action not in ("post_add", "post_remove", "post_clear"):
        return
    if not reverse:
        _tell_open_sockets({instance.pk})
    else:
        before: set[int] = getattr(instance, "_members_before_clear", set())
        _tell_open_sockets(set(pk_set) if pk_set else before)


@receiver(post_save, sender=User)
def _user_saved(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return  # every log-in saves last_login: not a change of access
    _tell_open_sockets({instance.pk})


@receiver(post_delete, sender=User)
def _user_deleted(sender: Any, instance: Any, **kwargs: Any) -> None:
    _tell_open_sockets({instance.pk})


def _tell_open_sockets(user_ids: set[int]) -> None:
    """After commit, each of the users' open sockets checks their role again (consumers)."""

    def send() -> None:
        layer = get_channel_layer()
        for user_id in user_ids:
            try:
                async_to_sync(layer.group_send)(access_group(user_id), {"type": "access.changed"})
            except Exception:  # Redis down: sockets keep their role until they reconnect
                log.exception("could not tell user %s's open websockets of a role change", user_id)

    if user_ids:
        transaction.on_commit(send)
