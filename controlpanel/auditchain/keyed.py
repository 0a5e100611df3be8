"""The chain's key: each row's hash is also MACed (HMAC-SHA256) with a key derived from
SECRET_KEY, which the database does not hold.

A hash chain alone catches a changed row only when the later hashes are left as they were:
someone with write access to the table who recomputes every hash after the row they changed
leaves a chain that verifies. A row re-hashed without the key fails its MAC. Rows written
before the chain was keyed carry none; they form its first positions, and a row without a MAC
after one with a MAC is a break. SECRET_KEY_FALLBACKS are accepted, so rows MACed before a key
rotation still verify.
"""

from __future__ import annotations

from django.conf import settings
from django.utils.crypto import constant_time_compare, salted_hmac

SALT = "shardboard.audit.chain"


def mac_of(row_hash: str, secret: str | None = None) -> str:
    """The row's MAC under SECRET_KEY (or `secret`)."""
    return salted_hmac(SALT, row_hash, secret=secret, algorithm="sha256").hexdigest()


def mac_ok(row_hash: str, mac: str) -> bool:
    secrets = [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]
    return any(constant_time_compare(mac, mac_of(row_hash, secret)) for secret in secrets)
