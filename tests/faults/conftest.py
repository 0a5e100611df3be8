"""Fault tests: a Redis of the test's own (stopped and started), real host workers and
engines. The suite's summary prints the table of what each fault cost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from controlpanel.celery import app as celery_app
from tests.faults.support import results_path
from tests.faults.table import table
from tests.support.private_redis import PrivateRedis


def _point_celery_at(url: str) -> None:
    celery_app.conf.broker_url = url
    celery_app._pool = None  # the pool and producers were made for the old URL
    celery_app.amqp._producer_pool = None


@pytest.fixture
def broker(private_redis: PrivateRedis) -> Iterator[PrivateRedis]:
    """The web side (this process) sends its tasks through a Redis the test can stop."""
    old = celery_app.conf.broker_url
    _point_celery_at(private_redis.url)
    yield private_redis
    _point_celery_at(old)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    path = results_path()
    if path.exists():
        rows = json.loads(path.read_text())
        terminalreporter.write_sep("=", "faults: what each cost")
        terminalreporter.write_line(table(rows))
