"""When a deployment last had a request, the one wake in progress, and a replica going idle:
all in Redis.

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


# --- going idle: a replica between the idle decision and its sleep or stop ------------------
# The host worker marks the replica "going" before it drains it, and turns the mark into
# "committed" once drained, unless a request came meanwhile: the gateway, finding the replica
# drained, deletes a "going" mark (the sleep is called off and the replica comes back) or, seeing
# "committed", holds the request until the replica is asleep or scaled to zero and wakes it.
# One Redis script each, so exactly one side wins a race.

GOING = "going"
COMMITTED = "committed"
# Committed only if still going and no request was recorded since the idle decision.
COMMIT_SCRIPT = """
if redis.call('GET', KEYS[1]) ~= 'going' then return 0 end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last and last > tonumber(ARGV[1]) then redis.call('DEL', KEYS[1]) return 0 end
redis.call('SET', KEYS[1], 'committed', 'PX', ARGV[2])
return 1
"""
# Per key: "off" (was going: called off), "committed", or "" (no mark).
CALL_OFF_SCRIPT = """
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v == 'going' then redis.call('DEL', key) out[i] = 'off'
  elseif v == 'committed' then out[i] = 'committed'
  else out[i] = '' end
end
return out
"""


def going_key(deployment_id: int) -> str:
    return f"shardboard:idle:going:{deployment_id}"


def going_begin(deployment_id: int, ttl_s: float) -> bool:
    """Mark the replica going idle (False: Redis did not answer; it goes idle unguarded)."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        client.set(going_key(deployment_id), GOING, px=max(int(ttl_s * 1000), 1))
        return True
    except (RedisError, OSError) as exc:
        logger.warning("going idle of replica %s not marked: %s", deployment_id, exc)
        return False
    finally:
        client.close()


def going_commit(deployment_id: int, name: str, decided_s: float, ttl_s: float) -> bool:
    """True: go on to sleep or stop. False: a request came since `decided_s` (the wall-clock
    time of the idle decision) or the gateway called it off. Without Redis: True, as before."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        keys = [going_key(deployment_id), last_request_key(name)]
        ttl_ms = max(int(ttl_s * 1000), 1)
        return bool(client.eval(COMMIT_SCRIPT, 2, *keys, repr(decided_s), ttl_ms))
    except (RedisError, OSError) as exc:
        logger.warning("going idle of replica %s not checked: %s", deployment_id, exc)
        return True
    finally:
        client.close()


def going_state(deployment_ids: list[int]) -> dict[int, str]:
    """The replicas' marks ("going" or "committed"); those without one are left out."""
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        values = client.mget([going_key(pk) for pk in deployment_ids]) if deployment_ids else []
    except (RedisError, OSError) as exc:
        logger.warning("going-idle marks unknown, Redis unavailable: %s", exc)
        return {}
    finally:
        client.close()
    return {
        pk: (v.decode() if isinstance(v, bytes) else str(v))
        for pk, v in zip(deployment_ids, values, strict=True)
        if v
    }


def going_end(deployment_id: int) -> None:
    client = redisconn.client(connect_timeout_s=0.5, timeout_s=1)
    try:
        client.delete(going_key(deployment_id))
    except (RedisError, OSError) as exc:
        logger.warning("going-idle mark of replica %s left to expire: %s", deployment_id, exc)
    finally:
        client.close()
