"""Live deployment status for the list and detail pages, and the engine log of one deployment."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import redis
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from controlpanel.consumers import RoleConsumer
from deployments.live import enginelog, prep
from deployments.live.pushes import GROUP
from deployments.models import Deployment
from monitoring import live

PENDING_MAX = 50  # live batches held while the backfill is read (about 12 s of them)


class DeploymentsConsumer(RoleConsumer):
    def live_groups(self, user: Any) -> list[str]:
        return [GROUP]

    async def deployment_status(self, message: dict[str, Any]) -> None:
        await self.send_json(message["payload"])

    async def deployment_progress(self, message: dict[str, Any]) -> None:
        await self.send_json(message["payload"])


class EnginesConsumer(RoleConsumer):
    """``/ws/engines/``: each host's engine preparations as they move (the page rendered the
    rows as they were, and reads them again from ``/engines/state/`` whenever it connects)."""

    def live_groups(self, user: Any) -> list[str]:
        return [prep.GROUP]

    async def engine_prep(self, message: dict[str, Any]) -> None:
        await self.send_json(message["payload"])


def _backfill(pk: int, after: str) -> list[enginelog.Line]:
    return enginelog.after(pk, after) if after else enginelog.recent(pk)


class EngineLogConsumer(RoleConsumer):
    """``/ws/deployments/<pk>/log/[?after=<stream id>]``: the lines shipped after `after` (else
    the last few hundred), then each batch as the host worker ships it, never one line twice.

    Batches come through the process's ``monitoring.live`` hub (the host PUBLISHes each batch
    once), not one channel-layer message per browser. Those that arrive while the backfill is
    read are held and sent after it. Closes 4400 on a malformed `after`, 4404 for an unknown
    deployment. A page that reconnects passes the id of the last line it shows.
    """

    channel: str | None = None
    pending: list[str] | None = None
    last_key: tuple[int, int] = (0, 0)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:  # also when the server cancels a consumer that did not close in time
            self.leave_live()

    async def connect(self) -> None:
        self.pk = int(self.scope["url_route"]["kwargs"]["pk"])
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.after = (query.get("after") or [""])[-1]
        if self.after and not enginelog.is_stream_id(self.after):
            await self.close(code=4400)
            return
        if self.after:
            self.last_key = enginelog.id_key(self.after)
        await super().connect()

    async def refusal(self, user: Any) -> int | None:
        exists = await database_sync_to_async(Deployment.objects.filter(pk=self.pk).exists)()
        return None if exists else 4404

    async def on_accepted(self, user: Any) -> None:
        self.pending = []
        self.channel = enginelog.channel(self.pk)
        await live.hub().join(self.channel, self)
        try:
            lines = await sync_to_async(_backfill, thread_sensitive=False)(self.pk, self.after)
        except redis.RedisError:
            await self.send_json({"type": "log.error", "error": "the log store does not answer"})
            lines = []
        await self.send_lines(lines, always=True)
        held, self.pending = self.pending, None
        for text in held:
            await self.deliver(text)

    async def disconnect(self, code: int) -> None:
        self.leave_live()

    def leave_live(self) -> None:
        if self.channel is not None:
            live.hub().leave(self.channel, self)
            self.channel = None

    async def deliver(self, text: str) -> None:
        if self.pending is None:
            await self.send_lines(enginelog.decode_batch(text))
        elif len(self.pending) < PENDING_MAX:
            self.pending.append(text)

    async def send_lines(self, lines: list[enginelog.Line], *, always: bool = False) -> None:
        fresh = [line for line in lines if enginelog.id_key(line[0]) > self.last_key]
        if fresh:
            self.last_key = enginelog.id_key(fresh[-1][0])
        if fresh or always:
            await self.send_json({"type": "log.lines", "lines": [list(x) for x in fresh]})
