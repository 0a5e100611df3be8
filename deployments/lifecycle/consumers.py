"""Live deployment status for the list and detail pages."""

from __future__ import annotations

from typing import Any

from controlpanel.consumers import RoleConsumer
from deployments.events import GROUP


class DeploymentsConsumer(RoleConsumer):
    async def on_accepted(self, user: Any) -> None:
        await self.channel_layer.group_add(GROUP, self.channel_name)

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def deployment_status(self, message: dict[str, Any]) -> None:
        await self.send_json(message["payload"])
