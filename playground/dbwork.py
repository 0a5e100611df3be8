"""Database work of the gateway, off the event loop, in this app's own small thread pool.

Work handed to the pool runs to the end even when the request that asked for it is cancelled
(the client went away), and before the process exits normally (the pool's threads are joined
at exit, after the queued work), so an audit row submitted here is not lost with its request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import close_old_connections

T = TypeVar("T")
logger = logging.getLogger(__name__)
POOL_THREADS = 4


def _new_pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="playground-db")


_pool = _new_pool()


def _after_fork() -> None:
    # A forked child (test servers) inherits the pool object but none of its threads.
    global _pool
    _pool = _new_pool()


os.register_at_fork(after_in_child=_after_fork)


def submit(fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
    """Start `fn(*args)` in the pool; failures are logged (nobody may be waiting for them)."""

    def run() -> T:
        close_old_connections()  # as Django does between requests
        return fn(*args)

    future = _pool.submit(run)
    future.add_done_callback(_log_failure)
    return future


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in the pool, awaited; the caller's errors are raised, not logged."""

    def run() -> T:
        close_old_connections()
        return fn(*args)

    return await asyncio.wrap_future(_pool.submit(run))


async def wait(future: concurrent.futures.Future[T]) -> T:
    """The result of submitted work; cancelling the waiter does not cancel the work."""
    return await asyncio.shield(asyncio.wrap_future(future))


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    exc = None if future.cancelled() else future.exception()
    if exc is not None:
        logger.error(
            "playground database work failed", exc_info=(type(exc), exc, exc.__traceback__)
        )
