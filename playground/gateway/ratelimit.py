"""Requests per minute and tokens per day on /v1/, per API token and per user, in Redis.

One Lua script per request checks the four counts and, if none is at its limit, counts the
request in both minute windows: atomic, and shared by every web process. Tokens are charged
after the answer (its usage), so a day's limit stops the next request, not the one running.
Windows are fixed (the UTC minute, the UTC day); a refusal's Retry-After is the time to the
window's end, as the OpenAI API's 429 says when to come back. Redis down: unenforced, logged,
as the concurrency slots (gateway.limits).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.http import JsonResponse
from redis.exceptions import NoScriptError, RedisError

from playground.gateway.limits import _client

logger = logging.getLogger(__name__)
DAY_S = 86400
MINUTE_S = 60

_CHECK = """
for _, i in ipairs({3, 4, 1, 2}) do
  local limit = tonumber(ARGV[i])
  if limit > 0 then
    local used = tonumber(redis.call('GET', KEYS[i]) or '0')
    if used >= limit then return {i, used} end
  end
end
for i = 1, 2 do
  if tonumber(ARGV[i]) > 0 then
    redis.call('INCR', KEYS[i])
    redis.call('EXPIRE', KEYS[i], 120)
  end
end
return {0, 0}
"""
_CHECK_SHA = hashlib.sha1(_CHECK.encode(), usedforsecurity=False).hexdigest()
# Which limit the script names: 1 and 3 are the token's, 2 and 4 the user's.
_WHAT = {1: ("API token", "requests"), 2: ("account", "requests")}
_WHAT |= {3: ("API token", "tokens"), 4: ("account", "tokens")}


@dataclass(frozen=True, slots=True)
class Limits:
    """0: no limit."""

    rpm_token: int = 0
    rpm_user: int = 0
    tokens_day_token: int = 0
    tokens_day_user: int = 0

    @classmethod
    def from_settings(
        cls, *, rpm_token: int | None = None, tokens_day_token: int | None = None
    ) -> Limits:
        """The global settings; a token's own limits (None: the setting's) replace the
        per-token two."""
        return cls(
            settings.GATEWAY_RPM_PER_TOKEN if rpm_token is None else rpm_token,
            settings.GATEWAY_RPM_PER_USER,
            settings.GATEWAY_TOKENS_PER_DAY_PER_TOKEN
            if tokens_day_token is None
            else tokens_day_token,
            settings.GATEWAY_TOKENS_PER_DAY_PER_USER,
        )

    @property
    def counts_tokens(self) -> bool:
        return bool(self.tokens_day_token or self.tokens_day_user)

    def for_caller(self, bearer_id: str) -> list[int]:
        """The script's ARGV: a session caller has no token, so no token limits."""
        if bearer_id:
            return [self.rpm_token, self.rpm_user, self.tokens_day_token, self.tokens_day_user]
        return [0, self.rpm_user, 0, self.tokens_day_user]

    @property
    def any(self) -> bool:
        return any((self.rpm_token, self.rpm_user, self.tokens_day_token, self.tokens_day_user))


@dataclass(frozen=True, slots=True)
class Refusal:
    message: str
    kind: str  # "requests" | "tokens": the OpenAI error's type
    retry_after_s: int
    limit: int


def bearer_id(token_hash: str) -> str:
    """How the counts and the audit rows name a token: the start of its SHA-256."""
    return token_hash[:16]


def keys(user_id: int, bearer: str, now_s: float) -> list[str]:
    minute, day = int(now_s // MINUTE_S), int(now_s // DAY_S)
    token = bearer or "-"
    return [
        f"shardboard:rate:rpm:t:{token}:{minute}",
        f"shardboard:rate:rpm:u:{user_id}:{minute}",
        f"shardboard:rate:tpd:t:{token}:{day}",
        f"shardboard:rate:tpd:u:{user_id}:{day}",
    ]


async def admit(
    user_id: int, bearer: str, now_s: float, limits: Limits | None = None
) -> Refusal | None:
    """Count this request, or say which limit refuses it."""
    limits = limits or Limits.from_settings()
    if not limits.any:
        return None
    args = limits.for_caller(bearer)
    try:
        which, used = await _run(keys(user_id, bearer, now_s), args)
    except (RedisError, TimeoutError) as exc:
        logger.warning("gateway rate limits not enforced, Redis unavailable: %s", exc)
        return None
    if which == 0:
        return None
    return _refusal(int(which), int(used), args[int(which) - 1], now_s)


async def _run(key_list: list[str], args: list[int]) -> Any:
    client = _client()
    try:
        return await client.evalsha(_CHECK_SHA, 4, *key_list, *args)
    except NoScriptError:  # first use, or Redis restarted
        await client.script_load(_CHECK)
        return await client.evalsha(_CHECK_SHA, 4, *key_list, *args)


def _refusal(which: int, used: int, limit: int, now_s: float) -> Refusal:
    whose, kind = _WHAT[which]
    if kind == "requests":
        wait_s = MINUTE_S - now_s % MINUTE_S
        message = (
            f"Rate limit reached for your {whose}: {limit} requests per minute "
            f"({used} made this minute)."
        )
    else:
        wait_s = DAY_S - now_s % DAY_S
        message = (
            f"Rate limit reached for your {whose}: {limit:,} tokens per day (UTC) "
            f"({used:,} used today)."
        )
    retry_after_s = max(1, math.ceil(wait_s))
    return Refusal(f"{message} Retry after {retry_after_s} s.", kind, retry_after_s, limit)


def refusal_response(refusal: Refusal) -> JsonResponse:
    """A 429 shaped like the OpenAI API's."""
    body = {
        "error": {
            "message": refusal.message,
            "type": refusal.kind,
            "param": None,
            "code": "rate_limit_exceeded",
        }
    }
    response = JsonResponse(body, status=429)
    response["Retry-After"] = str(refusal.retry_after_s)
    response[f"x-ratelimit-limit-{refusal.kind}"] = str(refusal.limit)
    response[f"x-ratelimit-remaining-{refusal.kind}"] = "0"
    return response


async def charge(
    user_id: int, bearer: str, tokens: int, now_s: float, limits: Limits | None = None
) -> None:
    """Add a finished request's tokens to today's counts."""
    if tokens <= 0 or not (limits or Limits.from_settings()).counts_tokens:
        return
    day_keys = keys(user_id, bearer, now_s)[2:] if bearer else keys(user_id, bearer, now_s)[3:]
    try:
        async with _client().pipeline(transaction=True) as pipe:
            for key in day_keys:
                pipe.incrby(key, tokens)
                pipe.expire(key, 2 * DAY_S)
            await pipe.execute()
    except (RedisError, TimeoutError) as exc:
        logger.warning("gateway tokens not counted (%d), Redis unavailable: %s", tokens, exc)


def charge_soon(
    user_id: int, bearer: str, tokens: int, now_s: float, limits: Limits | None = None
) -> None:
    """`charge` in a task of its own: a relay that ends does not wait on Redis."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # recorded from a thread with no loop: nothing to charge it on
        logger.warning("gateway tokens not counted (%d): no event loop", tokens)
        return
    task = loop.create_task(charge(user_id, bearer, tokens, now_s, limits))
    _pending.add(task)
    task.add_done_callback(_pending.discard)


_pending: set[asyncio.Task[None]] = set()


def limits_of(caller: Any) -> Limits:
    """The limits a gateway caller (gateway.access.Caller) is held to: its token's own, where
    it has them, else the settings."""
    return Limits.from_settings(
        rpm_token=getattr(caller, "rpm_limit", None),
        tokens_day_token=getattr(caller, "tokens_per_day_limit", None),
    )
