"""Which replica keeps a Responses answer: id → (replica, caller) in Redis, for ROUTE_TTL_S.

vLLM keeps a Responses answer in the memory of the engine that made it: a GET, a cancel
(playground.gateway.followup) and a new response that continues it (`previous_response_id`,
vllm/entrypoints/openai/responses/protocol.py:279) must reach that replica, not whichever the
balancer would pick. Only the caller who made the answer is routed to it.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from redis.exceptions import RedisError

from playground.gateway.access import AccessError
from playground.gateway.limits import _client
from playground.gateway.upstream import Target

logger = logging.getLogger(__name__)
# How long a follow-up finds its replica: vLLM keeps stored responses until the engine stops,
# and a background response is polled for minutes, not days.
ROUTE_TTL_S = 24 * 3600
ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,200}")


def route_key(response_id: str) -> str:
    return f"sb:gw:response:{response_id}"


async def store(response_id: str, replica_id: int, user_id: int) -> None:
    if not ID_PATTERN.fullmatch(response_id):
        return
    value = json.dumps({"replica": replica_id, "user": user_id})
    try:
        await _client().set(route_key(response_id), value, ex=ROUTE_TTL_S)
    except RedisError as exc:  # the answer still reaches the client; a follow-up will 404
        logger.warning("could not remember the replica of response %s: %s", response_id, exc)


async def replica_of(response_id: str, user_id: int) -> int | None:
    """The replica that keeps `response_id` for `user_id` (None: unknown, or another's)."""
    try:
        raw = await _client().get(route_key(response_id))
    except RedisError as exc:
        raise AccessError(503, "gateway_unavailable", f"routes are unreadable: {exc}") from exc
    route = json.loads(raw) if raw else None
    if not isinstance(route, dict) or route.get("user") != user_id:
        return None
    replica = route.get("replica")
    return replica if isinstance(replica, int) else None


async def pinned(
    *, user_id: int, body: dict[str, Any], replicas: tuple[Target, ...]
) -> tuple[Target, ...]:
    """The replicas a new response may go to: the one that keeps its previous response, when
    that one is running (else all: the engine then answers that it does not know the id)."""
    previous = body.get("previous_response_id")
    if len(replicas) < 2 or not isinstance(previous, str) or not ID_PATTERN.fullmatch(previous):
        return replicas
    keeper = await replica_of(previous, user_id)
    kept = tuple(t for t in replicas if t.deployment_id == keeper)
    return kept or replicas
