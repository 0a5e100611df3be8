"""An optional copy of each new audit row to syslog (settings.AUDIT_SYSLOG_ADDRESS): a
record outside the database, so a rewrite of the chain's tail is still visible elsewhere.

Sent after commit (a rolled-back row was never in the trail); a syslog that does not answer
costs a logged error, never the write.
"""

from __future__ import annotations

import functools
import logging
import logging.handlers
import socket
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import transaction

from controlpanel.auditchain.canonical import canonical_json
from controlpanel.auditchain.records import record_of

logger = logging.getLogger(__name__)


def forward_on_commit(rows: Sequence[Any], *, using: str) -> None:
    address = settings.AUDIT_SYSLOG_ADDRESS
    if address:
        lines = [canonical_json(record_of(row)) for row in rows]
        transaction.on_commit(lambda: _send(address, lines), using=using, robust=True)


def _send(address: str, lines: list[str]) -> None:
    syslog = _logger_for(address)
    for line in lines:
        syslog.info("shardboard-audit: %s", line)


@functools.cache
def _logger_for(address: str) -> logging.Logger:
    """A logger of its own per address, not under the root one: its records go to syslog only."""
    syslog = logging.Logger(f"shardboard.audit.syslog.{address}", logging.INFO)
    handler = logging.handlers.SysLogHandler(
        address=_parse(address),
        facility=logging.handlers.SysLogHandler.LOG_AUTH,
        socktype=socket.SOCK_DGRAM,
    )
    syslog.addHandler(handler)
    return syslog


def _parse(address: str) -> str | tuple[str, int]:
    """'/dev/log' (a local socket) or 'host:port' (UDP; port 514 when left out)."""
    if address.startswith("/"):
        return address
    host, _, port = address.rpartition(":") if ":" in address else (address, "", "514")
    return (host.strip("[]"), int(port))
