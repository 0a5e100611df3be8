"""When a deployment last had a request, and the one wake in progress: both in Redis.

The gateway writes a name's last request time (at most once per TOUCH_EVERY_S per web process,
so a busy name costs one SET a second, not one per request); the host worker that owns the
engine reads it in its idle check (deployments.host.idle). The wake mark is set with NX by the
first request that finds the deployment asleep: it alone sends the wake, every later request
only waits for the state to change. Imports only controlpanel.redisconn: both sides use it.
"""

from __future__ import annotations

import logging
import time

from redis.exceptions import RedisError

from controlpanel import redisconn

logger = logging.getLogger(__name__)

TOUCH_EVERY_S = 1.0
# A last-request time outlives any idle setting a user would choose (a week): an expired key
# reads as "no request since the engine came up", which the idle check measures from woke_at.
LAST_TTL_S = 7 * 24 * 3600


def last_request_key(name: str) -> str:
    return f"shardboard:idle:last:{name}"


def wake_key(name: str) -> str:
    return f"shardboard:idle:wake:{name}"


def last_request_s(name: str) -> float | None:
    """The wall-clock time of `name`'s last request through the gateway; None: none recorded.
    Raises RedisError/OSError when Redis does not answer (logged): the caller then keeps the
    engine up, since nothing is known to be idle."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        raw = client.get(last_request_key(name))
    except (RedisError, OSError) as exc:
        logger.warning("last request of %s unknown, Redis unavailable: %s", name, exc)
        raise
    finally:
        client.close()
    return float(raw) if raw is not None else None


def record_request(name: str, now_s: float | None = None) -> None:
    """Sync form of the gateway's touch, for services and tests."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        client.set(last_request_key(name), repr(now_s or time.time()), ex=LAST_TTL_S)
    finally:
        client.close()


def claim_wake(name: str, hold_s: float) -> bool:
    """True for the one caller that should send the wake; the mark lasts as long as a request
    may wait for it, so a wake whose task was lost is sent again by the next request."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        return bool(client.set(wake_key(name), "1", nx=True, px=max(int(hold_s * 1000), 1)))
    except (RedisError, OSError) as exc:
        # Without Redis every request may send one; the host's compare-and-set keeps it one wake.
        logger.warning("wake of %s not deduplicated, Redis unavailable: %s", name, exc)
        return True
    finally:
        client.close()


def waking(name: str) -> bool:
    """A wake of `name` was asked for and has not ended (its mark is still there)."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        return bool(client.exists(wake_key(name)))
    except (RedisError, OSError) as exc:
        logger.warning("wake of %s unknown, Redis unavailable: %s", name, exc)
        return False
    finally:
        client.close()


def wake_done(name: str) -> None:
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        client.delete(wake_key(name))
    except (RedisError, OSError) as exc:
        logger.warning("wake mark of %s left to expire: %s", name, exc)
    finally:
        client.close()
