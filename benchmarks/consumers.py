"""A run's progress, live on its page."""

from __future__ import annotations

from typing import Any

from benchmarks.events import group
from controlpanel.consumers import RoleConsumer


class BenchmarkConsumer(RoleConsumer):
    async def on_accepted(self, user: Any) -> None:
        self.group_name = group(int(self.scope["url_route"]["kwargs"]["pk"]))
        await self.channel_layer.group_add(self.group_name, self.channel_name)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group_name"):
            await self.channel_layer.group_discard(self.group_name, self.channel_name)

    async def benchmark_progress(self, message: dict[str, Any]) -> None:
        await self.send_json(message["payload"])
