"""The live GPU websocket: a backfill of the chosen window, then every sample as it comes."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from controlpanel.consumers import RoleConsumer
from monitoring import selectors
from monitoring.history import WINDOWS_MS

DEFAULT_WINDOW = "5m"


def query_params(scope: dict[str, Any]) -> dict[str, str]:
    parsed = parse_qs(scope.get("query_string", b"").decode(), keep_blank_values=False)
    return {key: values[-1] for key, values in parsed.items()}


class GpuConsumer(RoleConsumer):
    """``/ws/gpus/?window=5m|1h|24h|7d[&host=NAME]``; send ``{"type": "window", "window": W}``
    for a new backfill. Closes 4400 on an unknown window."""

    async def connect(self) -> None:
        params = query_params(self.scope)
        self.window = params.get("window", DEFAULT_WINDOW)
        self.host = params.get("host") or None
        self.group = selectors.host_group(self.host) if self.host else selectors.ALL_GROUP
        if self.window not in WINDOWS_MS:
            await self.close(code=4400)
            return
        await super().connect()

    async def on_accepted(self, user: Any) -> None:
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.send_backfill()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def send_backfill(self) -> None:
        await self.send_json(
            await database_sync_to_async(selectors.backfill)(self.window, self.host)
        )

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "window":
            await self.send_json({"type": "error", "error": "expected {type: window, window: W}"})
            return
        if content.get("window") not in WINDOWS_MS:
            await self.send_json(
                {"type": "error", "error": f"unknown window, one of {list(WINDOWS_MS)}"}
            )
            return
        self.window = content["window"]
        await self.send_backfill()

    async def gpu_sample(self, event: dict[str, Any]) -> None:
        await self.send(text_data=event["text"])
