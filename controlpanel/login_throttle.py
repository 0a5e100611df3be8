"""Failed log-ins, counted per account and per client address in the shared cache (Redis), so
that every web process sees the same count. Past the limit the form refuses before it checks a
password, until the window ends; a success clears the account's count.

The address limit is higher than the account's: one office behind one address has many users,
while one account guessed from many addresses still meets the account's limit."""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import ValidationError
from redis.exceptions import RedisError

from controlpanel.audit import client_ip

log = logging.getLogger(__name__)
ADDRESS_FACTOR = 4  # an address may fail this many times the account limit


def _keys(username: str, address: str | None) -> dict[str, int]:
    """Cache key -> its limit. Hashed: no user name or address in Redis key listings."""
    limit = settings.LOGIN_FAILURE_LIMIT
    account = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    keys = {f"login-fail:user:{account}": limit}
    if address:
        keys[f"login-fail:addr:{address}"] = limit * ADDRESS_FACTOR
    return keys


def _over(keys: dict[str, int]) -> bool:
    counts = cache.get_many(list(keys))
    return any(int(counts.get(key) or 0) >= limit for key, limit in keys.items())


def _count(keys: dict[str, int]) -> None:
    try:
        for key in keys:
            # add() starts the window at the first failure; incr() keeps its expiry.
            if not cache.add(key, 1, timeout=settings.LOGIN_FAILURE_WINDOW_S):
                cache.incr(key)
    except RedisError:  # the failure still stands; only its count is lost
        log.warning("a failed log-in was not counted: Redis does not answer")


def _clear(key: str) -> None:
    try:
        cache.delete(key)
    except RedisError:  # the log-in still succeeds; the count expires with its window
        log.warning("a log-in's failure count was not cleared: Redis does not answer")


class ThrottledAuthenticationForm(AuthenticationForm):
    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": "Your username and password did not match. Please try again.",
        "throttled": "Too many failed log-ins for this account or from this address. "
        "Try again in %(minutes)d minutes, or ask an admin.",
    }

    def clean(self) -> dict[str, Any]:
        keys = _keys(self.cleaned_data.get("username") or "", client_ip(self.request))
        try:
            over = _over(keys)
        except RedisError:  # the password is still checked; only the count is missing
            log.warning("log-in throttling is off while Redis does not answer")
            return super().clean()
        if over:
            minutes = max(1, round(settings.LOGIN_FAILURE_WINDOW_S / 60))
            raise ValidationError(
                self.error_messages["throttled"], code="throttled", params={"minutes": minutes}
            )
        try:
            cleaned = super().clean()
        except ValidationError:
            _count(keys)
            raise
        _clear(next(iter(keys)))
        return cleaned
