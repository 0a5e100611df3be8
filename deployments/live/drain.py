"""Draining a replica: out of the gateway's rotation first, its streams finished, then stopped.

Both sides meet in Redis, never on a disk or in a process: the web side (a stop or scale-down
service, on commit) and the host worker about to stop the engine set the replica's drain key,
which the balancer's script reads with every pick, in every web process; the host worker then
waits, bounded by SHARDBOARD_DRAIN_GRACE_S, until the replica's in-flight set (the balancer's
count of the requests it holds, balance.inflight_key) is empty, and only then sends SIGTERM.
The pick and the count are one Redis script, so no request is admitted to a replica after its
drain key is set: once the set is empty, nothing admitted before the drain is still streaming.

The key expires (grace + a margin): a drain whose stop never came does not keep a replica out
for good. Sync: called from services and Celery tasks. Imports only controlpanel.redisconn: the
host worker calls it without importing the gateway (web side).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.conf import settings
from redis.exceptions import RedisError

from controlpanel import redisconn

logger = logging.getLogger(__name__)

POLL_S = 0.2
KEY_MARGIN_S = 60.0


def inflight_key(deployment_id: int) -> str:
    return f"shardboard:gateway:inflight:{deployment_id}"


def drain_key(deployment_id: int) -> str:
    return f"shardboard:gateway:drain:{deployment_id}"


def grace_s() -> float:
    return float(settings.SHARDBOARD_DRAIN_GRACE_S)


@dataclass(frozen=True, slots=True)
class Drained:
    """How a drain ended: `left` requests still in flight at the end (None: Redis did not
    answer), after `waited_s`."""

    left: int | None
    waited_s: float

    @property
    def clean(self) -> bool:
        return self.left == 0

    def describe(self) -> str:
        if self.left is None:
            return "not drained (Redis unavailable)"
        if self.left == 0:
            return f"drained in {self.waited_s:.1f} s"
        return f"{self.left} request(s) still streaming after the {self.waited_s:.0f} s grace"


def drain_begin(deployment_ids: Sequence[int]) -> bool:
    """Out of every web process's rotation from now; False when Redis did not answer (the
    database's `stopping` still takes them out within balance.ROTATION_S)."""
    ttl_ms = int((grace_s() + KEY_MARGIN_S) * 1000)
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1, one_try=True)
    try:
        pipe = client.pipeline(transaction=False)
        for pk in deployment_ids:
            pipe.set(drain_key(pk), "1", px=ttl_ms)
        pipe.execute()
        return True
    except (RedisError, OSError) as exc:
        logger.warning(
            "drain of replicas %s not shared, Redis unavailable: %s", deployment_ids, exc
        )
        return False
    finally:
        client.close()


def drain_end(deployment_ids: Sequence[int]) -> None:
    """Back in rotation (a replica that runs again under the same id)."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1, one_try=True)
    try:
        client.delete(*(drain_key(pk) for pk in deployment_ids))
    except (RedisError, OSError) as exc:
        logger.warning("drain marks of %s not cleared (they expire): %s", deployment_ids, exc)
    finally:
        client.close()


def in_flight(deployment_id: int) -> int | None:
    """Requests the gateway holds on the replica now (unexpired members); None: no answer."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1, one_try=True)
    try:
        return int(client.zcount(inflight_key(deployment_id), time.time(), "+inf"))
    except (RedisError, OSError) as exc:
        logger.warning("in-flight count of replica %s unavailable: %s", deployment_id, exc)
        return None
    finally:
        client.close()


def drain_wait(
    deployment_id: int,
    *,
    grace_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Drained:
    """Until the replica holds no request, at most `grace_s`."""
    started = clock()
    while True:
        left = in_flight(deployment_id)
        waited = clock() - started
        if left == 0 or left is None or waited >= grace_s:
            return Drained(left, waited)
        sleep(min(POLL_S, max(0.0, grace_s - waited)))


def drain_replica(deployment_id: int) -> Drained:
    """The host worker's half, before SIGTERM: mark it (again: the web's mark may have been
    lost), then wait for its streams, bounded by the grace."""
    drain_begin([deployment_id])
    return drain_wait(deployment_id, grace_s=grace_s())
