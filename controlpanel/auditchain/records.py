"""An audit row as a plain record: what exports and syslog carry, enough to re-check each
row's hash outside Shardboard."""

from __future__ import annotations

from typing import Any

from controlpanel.auditchain.canonical import canonical_ip, canonical_time

FIELDS = (
    "id",
    "seq",
    "created_at",
    "actor_id",
    "actor_name",
    "action",
    "target_type",
    "target_id",
    "client_ip",
    "detail",
    "prev_hash",
    "row_hash",
    "row_mac",
)


def record_of(row: Any) -> dict[str, Any]:
    record = {name: getattr(row, name) for name in FIELDS}
    record["created_at"] = canonical_time(row.created_at)
    record["client_ip"] = canonical_ip(row.client_ip)
    return record
