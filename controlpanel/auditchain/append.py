"""Appending to the chain: rows get their position, previous hash and own hash while the
writer holds the chain, so two transactions never link to the same head.

On PostgreSQL the chain is held by a transaction-scoped advisory lock, taken as late as
possible (at the audit write) and released at commit; the head is read after the lock, in a
new statement, so it sees the row the previous holder committed. SQLite's transactions start
IMMEDIATE (settings), so writers are already one at a time there. The unique position is the
last line: a writer that got past both would fail, not fork the chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, models
from django.utils import timezone

from controlpanel.auditchain.canonical import GENESIS, hash_of
from controlpanel.auditchain.keyed import mac_of

CHAIN_LOCK_KEY = 0x5EA1_A0D1  # pg_advisory_xact_lock's key for the audit chain


def hold_chain(using: str) -> None:
    """Hold the chain until the current transaction ends (call inside an atomic block)."""
    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_KEY])


def chain_head(model: type[models.Model], using: str) -> tuple[int, str]:
    """(position, hash) of the last row of the chain; (0, GENESIS) when it is empty."""
    head = (
        model._default_manager.using(using)
        .filter(seq__isnull=False)
        .order_by("-seq")
        .values_list("seq", "row_hash")
        .first()
    )
    return head if head is not None else (0, GENESIS)


def seal(rows: Sequence[Any], *, using: str) -> None:
    """Give unsaved audit rows their chain fields, in order, after the current head. The
    caller holds the chain (hold_chain) in the transaction that inserts them."""
    if not rows:
        return
    seq, prev = chain_head(type(rows[0]), using)
    now = timezone.now()
    for row in rows:
        seq += 1
        row.seq, row.prev_hash, row.created_at = seq, prev, now
        row.detail = row.detail if row.detail is not None else {}
        row.row_hash = prev = hash_of(row)
        row.row_mac = mac_of(row.row_hash)
