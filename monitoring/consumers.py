"""The live GPU websocket: a backfill of the chosen window, then every sample as it comes."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from controlpanel.consumers import RoleConsumer
from monitoring import live, selectors
from monitoring.history import WINDOWS_MS

DEFAULT_WINDOW = "5m"
PENDING_MAX = 10  # live messages held while a backfill is being read (about 10 s of them)


def query_params(scope: dict[str, Any]) -> dict[str, str]:
    parsed = parse_qs(scope.get("query_string", b"").decode(), keep_blank_values=False)
    return {key: values[-1] for key, values in parsed.items()}


class GpuConsumer(RoleConsumer):
    """``/ws/gpus/?window=5m|1h|24h|7d[&host=NAME]``. Closes 4400 on an unknown window.

    From the page: ``{"type": "window", "window": W}`` for a new backfill of every host, and
    ``{"type": "host", "h": NAME}`` for a backfill of one host it has not seen yet (one that
    registered after the page loaded). Live messages come through the process's
    ``live.hub()``, not the channel layer; those that arrive while a backfill is being read
    are held and sent after it, so a page always gets its backfill first.
    """

    stream: str | None = None
    pending: list[str] | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:  # also when the server cancels a consumer that did not close in time
            self.leave_live()

    async def connect(self) -> None:
        params = query_params(self.scope)
        self.window = params.get("window", DEFAULT_WINDOW)
        self.host = params.get("host") or None
        if self.window not in WINDOWS_MS:
            await self.close(code=4400)
            return
        await super().connect()

    async def on_accepted(self, user: Any) -> None:
        self.pending = []
        self.stream = live.stream(self.host)
        await live.hub().join(self.stream, self)
        await self.send_backfill()

    async def disconnect(self, code: int) -> None:
        self.leave_live()

    def leave_live(self) -> None:
        if self.stream is not None:
            live.hub().leave(self.stream, self)
            self.stream = None

    async def send_backfill(self, host: str | None = None) -> None:
        if self.pending is None:
            self.pending = []
        message = await database_sync_to_async(selectors.backfill)(self.window, host or self.host)
        await self.send_json(message)
        held, self.pending = self.pending, None
        for text in held:
            await self.send(text_data=text)

    async def deliver(self, text: str) -> None:
        if self.pending is None:
            await self.send(text_data=text)
        elif len(self.pending) < PENDING_MAX:
            self.pending.append(text)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "window":
            await self.change_window(content.get("window"))
        elif kind == "host" and isinstance(content.get("h"), str) and content["h"]:
            if self.host is not None and content["h"] != self.host:
                await self.send_json({"type": "error", "error": "this socket watches one host"})
                return
            await self.send_backfill(content["h"])
        else:
            await self.send_json(
                {
                    "type": "error",
                    "error": "expected {type: window, window: W} or {type: host, h: H}",
                }
            )

    async def change_window(self, window: Any) -> None:
        if window not in WINDOWS_MS:
            await self.send_json(
                {"type": "error", "error": f"unknown window, one of {list(WINDOWS_MS)}"}
            )
            return
        self.window = window
        await self.send_backfill()
