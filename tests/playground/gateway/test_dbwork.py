"""The gateway's database writer (playground.dbwork): group commits, one bad write alone."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from django.contrib.auth.models import Group
from django.db import IntegrityError, connection
from psycopg import sql

from playground.gateway.dbwork import GroupWriter

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def writers() -> Any:
    made: list[GroupWriter] = []

    def make(window_s: float) -> GroupWriter:
        made.append(GroupWriter(window_s=window_s))
        return made[-1]

    yield make
    for writer in made:
        writer.close()


def _group(name: str) -> list[Any]:
    return [Group(name=name)]


def _broken(name: str) -> list[Any]:
    raise ValueError("this write cannot even be built")


def _names() -> set[str]:
    return set(Group.objects.values_list("name", flat=True))


@pytest.mark.postgres
def test_writes_close_together_share_one_transaction_in_order(writers: Any) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the inserting transaction (xmin) is read from PostgreSQL")
    writer = writers(0.3)
    futures = [writer.submit(_group, f"g{i}") for i in range(5)]
    rows = [f.result(timeout=5)[0] for f in futures]
    pks = [row.pk for row in rows]
    assert None not in pks and pks == sorted(pks)  # ids follow the order of submission
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT xmin::text FROM auth_group WHERE id = ANY(%s)", [pks])
        assert len(cursor.fetchall()) == 1, "one transaction for the group"


def test_a_failing_insert_loses_nothing_else(writers: Any) -> None:
    Group.objects.create(name="taken")
    writer = writers(0.3)
    good = writer.submit(_group, "kept-1")
    duplicate = writer.submit(_group, "taken")  # unique name: the INSERT fails
    unbuildable = writer.submit(_broken, "never")
    also_good = writer.submit(_group, "kept-2")
    assert good.result(timeout=5)[0].pk and also_good.result(timeout=5)[0].pk
    with pytest.raises(IntegrityError):
        duplicate.result(timeout=5)
    with pytest.raises(ValueError):
        unbuildable.result(timeout=5)
    assert {"kept-1", "kept-2"} <= _names()
    assert Group.objects.filter(name="taken").count() == 1


def test_an_urgent_write_does_not_wait_for_the_group_window(writers: Any) -> None:
    writer = writers(5.0)
    lazy = writer.submit(_group, "lazy")
    started = time.monotonic()
    urgent = writer.submit(_group, "urgent", urgent=True)
    assert urgent.result(timeout=5) and lazy.result(timeout=5)
    assert time.monotonic() - started < 2.0  # not the 5 s window
    assert {"lazy", "urgent"} <= _names()


def test_a_write_waits_at_most_the_window(writers: Any) -> None:
    writer = writers(0.2)
    started = time.monotonic()
    assert writer.submit(_group, "soon").result(timeout=5)
    assert 0.15 <= time.monotonic() - started < 2.0


@pytest.mark.postgres
def test_rows_outlive_a_database_restart(writers: Any) -> None:
    """The database goes away under the writer for a while (its connection terminated, new
    ones refused, as during a restart) and comes back: no row is lost."""
    if connection.vendor != "postgresql":
        pytest.skip("pg_terminate_backend and ALLOW_CONNECTIONS are PostgreSQL's")
    writer = writers(0.05)
    writer.submit(_group, "before").result(timeout=10)  # the writer's connection is open now
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database(), pg_backend_pid()")
        name, mine = cursor.fetchone()
    params = connection.get_connection_params()
    admin = psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True)
    try:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name)))  # fmt: skip
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> %s",
            [name, mine],
        )
        futures = [writer.submit(_group, f"after-{i}") for i in range(3)]
        time.sleep(2.0)  # the writer meets a refused connection, more than once
        assert not any(f.done() for f in futures)
    finally:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name)))  # fmt: skip
        admin.close()
    assert all(f.result(timeout=20)[0].pk for f in futures)
    assert {"before", "after-0", "after-1", "after-2"} <= _names()
