"""The synchronous HTTP client for calls to engines: health probes, /metrics scrapes, smoke
tests, readiness polls, sleep and wake, adapter loads. One per process, shared by its threads.

`httpx.get` and `httpx.post` build a Client per call, and each Client an SSL context from the
CA bundle: 46 ms of CPU here even for the plain-HTTP URLs of engines. The watchdog probes every
running engine each second and the autoscaler scrapes every replica each pass, so a host paid
it per engine per second; with 30 requests in flight on two loaded cores, a scrape from the
same process waited on those contexts for the length of the load (docs/performance.md).

No keep-alive: an engine that restarts on the same port would meet a pooled connection the old
one closed, and a health probe must not fail on that; a loopback connect costs microseconds.
No proxy from the environment either: engines listen on loopback or the host's private address.
A fork (Celery's prefork pool) gets a client of its own.
"""

from __future__ import annotations

import os
import threading

import httpx

_lock = threading.Lock()
_client: httpx.Client | None = None
_pid = 0


def client() -> httpx.Client:
    """This process's client; callers give each request its own timeout."""
    global _client, _pid
    with _lock:
        if _client is None or _pid != os.getpid():
            _client = httpx.Client(
                limits=httpx.Limits(max_keepalive_connections=0), trust_env=False
            )
            _pid = os.getpid()
        return _client
