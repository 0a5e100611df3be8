"""kombu's Redis transport, with one guard that keeps a host worker alive through a Redis outage.

When the broker goes away while a host worker holds an ``acks_late`` message (a launch waiting
for its engine to become ready), Celery's consumer collects the broken connection and then
closes it (celery/worker/consumer/consumer.py, ``on_connection_error_after_connected``). The
collect has already detached the transport from its connection, so the close's attempt to
put the unacknowledged message back (kombu/transport/virtual/base.py
``restore_unacked_once`` → kombu/transport/redis.py ``restore_unacked`` → ``_connparams``)
dereferences ``None`` and raises AttributeError, which the close's ``ignore_errors`` does not
ignore: the worker logs "Unrecoverable error" and exits (kombu 5.7.0, celery 5.7.0), leaving
its engines unwatched until someone restarts it. The fault test
``tests/faults/test_redis_outage.py::test_redis_down_during_stop`` hit it whenever the launch
task was still in hand when Redis stopped (under load; not on an idle machine).

The same happens to the task's late ack when it finishes on the old channel after the
reconnect (kombu/message.py ``ack_log_error`` catches only connection errors).

The guard: a channel whose transport is detached raises the connection error it stands for,
not AttributeError, so every caller's own handling applies (the close ignores it, the ack logs
it). Neither could have worked: both write to the Redis just lost. The message stays in the
broker's unacked set, from which kombu restores it after the visibility timeout, and the
task's own compare-and-set makes that late copy a no-op; the host worker's sweeper covers work
whose message is held meanwhile.
Selected by ``CELERY_BROKER_TRANSPORT`` in settings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis
from redis.exceptions import ConnectionError as RedisConnectionError

logger = logging.getLogger(__name__)


class Channel(redis.Channel):
    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        transport = self.connection
        if client is None and (transport is None or transport.client is None):
            logger.warning("broker channel used after its connection was lost")
            raise RedisConnectionError("the broker connection was lost")
        with super().conn_or_acquire(client) as acquired:
            yield acquired


class Transport(redis.Transport):
    Channel = Channel
