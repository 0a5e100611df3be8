"""The canonical form of an audit row and its hash: pure functions, no Django.

The hash is over what the database gives back, not what Python wrote: PostgreSQL's jsonb
reorders keys and prints a float that is a whole number past 1e16 as an integer, and inet
prints addresses compressed. So keys are sorted, whole floats become integers and addresses
are written in one form, at write time and at verification alike.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64  # the "previous hash" of the first row


def normal(value: Any) -> Any:
    """`value` with dict keys as strings, tuples as lists and whole floats as integers."""
    kind = type(value)
    if kind is dict:
        return {k if type(k) is str else str(k): normal(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [normal(v) for v in value]
    if kind is float and value.is_integer():
        return int(value)
    if kind in _LEAVES:
        return value
    return normal(_as_plain(value))


_LEAVES = frozenset({str, int, bool, float, type(None)})


def _as_plain(value: Any) -> Any:
    """A subclass of dict, list, float... (rare) as its base type, so the walk above ends."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, bool | int | float | str):
        return json.loads(json.dumps(value))  # an IntEnum, a str subclass: the JSON it makes
    return value


def canonical_json(value: Any) -> str:
    """One text for one value: sorted keys, no spaces, ASCII only (a lone surrogate survives)."""
    return json.dumps(normal(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


@functools.lru_cache(maxsize=4096)
def canonical_ip(ip: str | None) -> str | None:
    if not ip:
        return None
    try:
        return str(ipaddress.ip_address(ip))
    except ValueError:
        return ip


def canonical_time(moment: datetime) -> str:
    if moment.utcoffset():
        moment = moment.astimezone(UTC)
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def row_hash(
    *,
    seq: int,
    prev_hash: str,
    created_at: datetime,
    actor_id: int | None,
    actor_name: str,
    action: str,
    target_type: str,
    target_id: str,
    detail: Any,
    client_ip: str | None,
) -> str:
    """SHA-256 (hex) of the row's canonical JSON, which includes the previous row's hash."""
    content = {
        "v": 1,
        "seq": seq,
        "prev": prev_hash,
        "at": canonical_time(created_at),
        "actor_id": actor_id,
        "actor": actor_name,
        "action": action,
        "target_type": target_type,
        "target_id": target_id,
        "detail": detail,
        "ip": canonical_ip(client_ip),
    }
    return hashlib.sha256(canonical_json(content).encode("ascii")).hexdigest()


def hash_of(row: Any) -> str:
    """row_hash of anything with an audit row's attributes: a model instance (the historical
    one in a migration too) or a named row from values_list."""
    return row_hash(
        seq=row.seq,
        prev_hash=row.prev_hash,
        created_at=row.created_at,
        actor_id=row.actor_id,
        actor_name=row.actor_name,
        action=row.action,
        target_type=row.target_type,
        target_id=row.target_id,
        detail=row.detail,
        client_ip=row.client_ip,
    )
