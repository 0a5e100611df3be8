"""Thin websocket consumers: authenticate on connect, join groups, forward events."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib.auth import get_user_model

from controlpanel.roles import Role, has_role

EVENTS_GROUP = "events"


def _reload(user_id: int) -> Any:
    return get_user_model().objects.filter(pk=user_id).first()


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def access_group(user_id: int) -> str:
    """Every open socket of a user; told when their roles or account change."""
    return f"access.{user_id}"


class RoleConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """Closes with 4401 for anonymous users and 4403 for users below `required_role`, on
    connect and again whenever the user's roles or account change while the socket is open
    (a demoted or deactivated user stops receiving at once, not at their next page)."""

    required_role = Role.VIEWER
    groups: list[str] = []  # Channels joins these on connect and leaves them on disconnect

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        # Joined before the role is read again: a change saved after that read is then told to
        # this socket, where joining after the accept left a window in which a deactivation or
        # demotion was missed and the socket stayed open. In self.groups, so that Channels
        # leaves it on disconnect whatever a subclass does.
        self.groups = [*self.groups, access_group(user.pk)]
        await self.channel_layer.group_add(self.groups[-1], self.channel_name)
        fresh = await database_sync_to_async(_reload)(user.pk)  # the scope's copy may predate it
        if fresh is None or not await database_sync_to_async(has_role)(fresh, self.required_role):
            await self.refuse(4403)
            return
        if (code := await self.refusal(fresh)) is not None:
            await self.refuse(code)
            return
        # Joined before the accept: a page reads the state again when its socket opens, and a
        # push sent between that read and a join after the accept was lost (a preparation's
        # row stayed behind on the dashboard until its next change). Pushes that arrive now
        # wait for this handler to end, so none is sent before the accept.
        for group in self.live_groups(user):
            self.groups.append(group)
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.on_accepted(user)

    async def refuse(self, code: int) -> None:
        # Refused before the accept, a socket may never see websocket.disconnect: leave now.
        for group in self.groups:
            await self.channel_layer.group_discard(group, self.channel_name)
        await self.close(code=code)

    async def access_changed(self, message: dict[str, Any]) -> None:
        user = await database_sync_to_async(_reload)(self.scope["user"].pk)
        if user is None or not await database_sync_to_async(has_role)(user, self.required_role):
            await self.close(code=4403)

    async def refusal(self, user: Any) -> int | None:
        """A close code for a user allowed in who asks for something absent; None: accept."""
        return None

    def live_groups(self, user: Any) -> list[str]:
        """The groups whose pushes this socket forwards, joined before the accept and left on
        disconnect (Channels leaves every group in self.groups)."""
        return []

    async def on_accepted(self, user: Any) -> None:
        """Send a backfill: subclasses fill this in."""


class EventsConsumer(RoleConsumer):
    """Server-side events for the signed-in user (deployment status changes, notices)."""

    def live_groups(self, user: Any) -> list[str]:
        return [EVENTS_GROUP, user_group(user.pk)]

    async def on_accepted(self, user: Any) -> None:
        await self.send_json({"type": "hello", "user": user.get_username()})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"type": "pong", "echo": content.get("echo")})

    async def event_push(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])
