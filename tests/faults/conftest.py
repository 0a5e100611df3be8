"""Fault tests: a Redis or a PostgreSQL of the test's own (stopped and started), real host
workers and engines. The suite's summary prints the table of what each fault cost."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection

from controlpanel.celery import app as celery_app
from tests.faults.support import results_path
from tests.faults.table import table
from tests.support.private_postgres import PrivatePostgres
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


@pytest.fixture
def private_postgres(transactional_db: None, tmp_path: Path) -> Iterator[PrivatePostgres]:
    """This process, and every process the test starts (their DATABASE_URL is read from the
    same settings), on a migrated PostgreSQL of the test's own that it may stop and start."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL")
    server = PrivatePostgres(tmp_path)
    saved = dict(connection.settings_dict)
    connection.close()
    private = {"HOST": "127.0.0.1", "PORT": server.port, "USER": "postgres", "PASSWORD": ""}
    connection.settings_dict.update(NAME="shardboard", **private)
    try:
        server.init()
        call_command("migrate", verbosity=0, interactive=False)
        ContentType.objects.clear_cache()  # ids of the test database's rows
        yield server
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
        ContentType.objects.clear_cache()
        server.remove()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    path = results_path()
    if path.exists():
        rows = json.loads(path.read_text())
        terminalreporter.write_sep("=", "faults: what each cost")
        terminalreporter.write_line(table(rows))
