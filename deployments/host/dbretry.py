"""Database calls of the host worker that outlive a dropped connection or a restarted server.

A PostgreSQL restart (or a backend terminated by an administrator) breaks the thread's
connection; Django does not reconnect by itself inside a running task. The call is tried
again on a fresh connection with a growing pause, for about half a minute; after that the
error goes up and the sweeper takes the work over later (`host.sweeper`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from django.db import InterfaceError, OperationalError, connection

T = TypeVar("T")
log = logging.getLogger(__name__)
RETRY_FOR_S = 30.0


def retried(fn: Callable[[], T], *, retry_for_s: float = RETRY_FOR_S) -> T:
    deadline = time.monotonic() + retry_for_s
    pause_s = 0.2
    while True:
        try:
            return fn()
        except (OperationalError, InterfaceError) as exc:
            if time.monotonic() + pause_s > deadline:
                raise
            log.warning("database call failed (%s); trying again in %.1f s", exc, pause_s)
            connection.close()  # this thread's broken connection; the next call opens one
            time.sleep(pause_s)
            pause_s = min(pause_s * 2, 4.0)
