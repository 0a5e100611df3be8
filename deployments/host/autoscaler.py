"""The autoscaler's loop, in every host worker; a Redis lease lets exactly one run it.

No new daemon and no Celery beat to deploy: each host worker starts this thread when it is
ready; the one holding the lease (renewed every pass, expiring after three missed passes)
runs `deployments.autoscale.controller` every SHARDBOARD_AUTOSCALE_TICK_S. When that worker
dies, another takes the lease within three passes. Why not beat: beat is one more process to
run exactly once fleet-wide, which is the problem the lease solves anyway.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any

from celery.signals import worker_ready, worker_shutdown
from django.conf import settings
from django.db import close_old_connections

from controlpanel import redisconn
from deployments.autoscale.controller import Controller

log = logging.getLogger(__name__)
LEASE_KEY = "autoscale:leader"
# Take the lease when free, or renew it when ours: one script, so two workers never both hold it.
_HOLD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""
_stop = threading.Event()


def holds_lease(client: Any, me: str, ttl_s: float) -> bool:
    return bool(client.eval(_HOLD, 1, LEASE_KEY, me, int(ttl_s * 1000)))


def run(stop: threading.Event) -> None:
    tick_s = settings.SHARDBOARD_AUTOSCALE_TICK_S
    client = redisconn.client(connect_timeout_s=1.0, timeout_s=2.0)
    me = f"{settings.SHARDBOARD_HOST_NAME}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    controller = Controller()
    while not stop.wait(tick_s):
        try:
            if holds_lease(client, me, 3 * tick_s):
                controller.tick(now_s=time.time())
            else:
                controller.forget()
        except Exception:  # the loop must outlive a Redis or database hiccup; logged, retried
            log.exception("autoscaler pass failed")
        finally:
            close_old_connections()


@worker_ready.connect
def _on_ready(**_: Any) -> None:
    threading.Thread(target=run, args=(_stop,), name="autoscaler", daemon=True).start()


@worker_shutdown.connect
def _on_shutdown(**_: Any) -> None:
    _stop.set()
