"""Database work of the gateway, off the event loop, in this app's own threads.

Reads (`in_thread`) run in a small pool. Writes (`submit`: the audit row and the run of each
request) go to one writer thread that inserts them in groups: the rows that arrive within
WRITE_GROUP_S of the first pending one share one transaction and one INSERT per table, so a
busy gateway pays one commit per group, not per request, and the write of a finished answer
does not compete with the next request's first token. A waited-for write (the playground
page shows the run's id) is committed at once, with whatever is pending.

Work handed here runs to the end even when the request that asked for it is cancelled (the
client went away), and before the process exits normally (the threads are joined at exit,
after the queued work), so an audit row submitted here is not lost with its request; nor with
a database restart: a lost connection is retried on a new one for up to RETRY_FOR_S.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
    models,
    transaction,
)

T = TypeVar("T")
logger = logging.getLogger(__name__)
POOL_THREADS = 4
WRITE_GROUP_S = 0.05
WRITE_GROUP_MAX = 500
RETRY_FOR_S = 60.0  # a database restart or fail-over, not an outage


Rows = list[models.Model]


@dataclass(slots=True)
class _Write:
    build: Callable[..., Rows]
    args: tuple[Any, ...]
    future: concurrent.futures.Future[Rows]


class GroupWriter:
    """One thread; rows submitted close together are inserted in one transaction."""

    def __init__(self, window_s: float = WRITE_GROUP_S, max_group: int = WRITE_GROUP_MAX) -> None:
        self.window_s, self.max_group = window_s, max_group
        # The executor's one thread is joined at interpreter exit after its queued flushes.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "playground-db-write")
        self._lock = threading.Lock()
        self._pending: list[_Write] = []
        self._scheduled = False
        self._now = threading.Event()  # a waited-for write is pending: no grouping delay

    def submit(
        self, build: Callable[..., Rows], *args: Any, urgent: bool = False
    ) -> concurrent.futures.Future[Rows]:
        """Insert the unsaved rows `build(*args)` returns; the future has them, saved."""
        future: concurrent.futures.Future[Rows] = concurrent.futures.Future()
        future.add_done_callback(_log_failure)
        with self._lock:
            self._pending.append(_Write(build, args, future))
            if urgent or len(self._pending) >= self.max_group:
                self._now.set()
            if not self._scheduled:
                self._scheduled = True
                self._executor.submit(self._flush)
        return future

    def close(self) -> None:
        """Commit what is pending, close this thread's database connection, stop the thread."""
        self._now.set()
        self._executor.submit(connections.close_all).result()
        self._executor.shutdown(wait=True)

    def _flush(self) -> None:
        self._now.wait(self.window_s)
        with self._lock:
            group, self._pending = self._pending, []
            self._scheduled = False
            self._now.clear()
        close_old_connections()  # as Django does between requests
        built = [(write, rows) for write in group if (rows := _build(write)) is not None]
        try:
            _insert_retrying([row for _, rows in built for row in rows])
        except Exception:  # one bad row must not take the others with it: one by one
            logger.warning("a group of %d gateway writes failed; retrying one by one", len(built))
            for write, rows in built:
                _insert_alone(write, rows)
        else:
            for write, rows in built:
                write.future.set_result(rows)


def _build(write: _Write) -> Rows | None:
    try:
        return write.build(*write.args)
    except Exception as exc:
        write.future.set_exception(exc)
        return None


def _insert(rows: Rows) -> None:
    """One INSERT per model, in submission order (ids follow it)."""
    by_model: dict[type[models.Model], Rows] = {}
    for row in rows:
        by_model.setdefault(type(row), []).append(row)
    for model, model_rows in by_model.items():
        model._default_manager.bulk_create(model_rows)


def _insert_retrying(rows: Rows) -> None:
    """Insert in one transaction; a lost or refused connection (the database restarted, a
    fail-over) is retried on a new one for up to RETRY_FOR_S, so audit rows outlive it. A
    statement the database refuses (a constraint) is not retried: it fails at once."""
    deadline = time.monotonic() + RETRY_FOR_S
    delay_s = 0.2
    while True:
        try:
            with transaction.atomic():
                _insert(rows)
            return
        except (OperationalError, InterfaceError):
            if time.monotonic() + delay_s > deadline:
                raise
            logger.warning(
                "gateway writes: the database connection failed; again in %.1f s", delay_s
            )
            connections.close_all()
            for row in rows:  # the rolled-back attempt may have handed out ids
                row.pk = None
                row._state.adding = True
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 5.0)


def _insert_alone(write: _Write, rows: Rows) -> None:
    for row in rows:  # a rolled-back group may have handed out ids already
        row.pk = None
        row._state.adding = True
    try:
        with transaction.atomic():
            _insert(rows)
    except Exception as exc:
        write.future.set_exception(exc)
    else:
        write.future.set_result(rows)


def _new_pool() -> concurrent.futures.ThreadPoolExecutor:
    return concurrent.futures.ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="playground-db")


_pool = _new_pool()
_writer = GroupWriter()


def _after_fork() -> None:
    # A forked child (test servers) inherits the executors but none of their threads.
    global _pool, _writer
    _pool, _writer = _new_pool(), GroupWriter()


os.register_at_fork(after_in_child=_after_fork)


def submit(
    build: Callable[..., Rows], *args: Any, urgent: bool = False
) -> concurrent.futures.Future[Rows]:
    """Insert the rows `build(*args)` makes, soon (`urgent`: now); failures are logged."""
    return _writer.submit(build, *args, urgent=urgent)


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
