"""A run's progress, live on its page."""

from __future__ import annotations

from typing import Any

from benchmarks.events import group
from controlpanel.consumers import RoleConsumer


class BenchmarkConsumer(RoleConsumer):
    def live_groups(self, user: Any) -> list[str]:
        return [group(int(self.scope["url_route"]["kwargs"]["pk"]))]

    async def benchmark_progress(self, message: dict[str, Any]) -> None:
        await self.send_json(message["payload"])
