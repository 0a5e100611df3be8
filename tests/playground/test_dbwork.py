"""The gateway's database writer (playground.dbwork): group commits, one bad write alone."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import connection

from playground.dbwork import GroupWriter

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


def _create(name: str) -> int:
    return Group.objects.create(name=name).pk


def _fail(name: str) -> Any:
    Group.objects.create(name=name)
    raise ValueError("this write fails")


def _create_in(name: str) -> tuple[int, int]:
    """The new row's id, and the id of the transaction that wrote it."""
    pk = Group.objects.create(name=name).pk
    with connection.cursor() as cursor:
        cursor.execute("SELECT txid_current()")
        return pk, cursor.fetchone()[0]


@pytest.mark.postgres
def test_writes_close_together_share_one_commit_and_each_gets_its_result(writers: Any) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("transaction ids are read from PostgreSQL")
    writer = writers(0.3)
    futures = [writer.submit(_create_in, f"g{i}") for i in range(5)]
    results = [f.result(timeout=5) for f in futures]
    assert len({txid for _, txid in results}) == 1, "one transaction for the group"
    pks = [pk for pk, _ in results]
    assert pks == sorted(pks)  # written in the order they were submitted
    names = set(Group.objects.values_list("name", flat=True))
    assert {f"g{i}" for i in range(5)} <= names


def test_a_failing_write_loses_nothing_else_and_is_not_half_done(writers: Any) -> None:
    writer = writers(0.3)
    good = writer.submit(_create, "kept-1")
    bad = writer.submit(_fail, "rolled-back")
    also_good = writer.submit(_create, "kept-2")
    assert good.result(timeout=5) and also_good.result(timeout=5)
    with pytest.raises(ValueError):
        bad.result(timeout=5)
    names = set(Group.objects.values_list("name", flat=True))
    assert {"kept-1", "kept-2"} <= names and "rolled-back" not in names


def test_an_urgent_write_does_not_wait_for_the_group_window(writers: Any) -> None:
    writer = writers(5.0)
    lazy = writer.submit(_create, "lazy")
    started = time.monotonic()
    urgent = writer.submit(_create, "urgent", urgent=True)
    assert urgent.result(timeout=5) and lazy.result(timeout=5)
    assert time.monotonic() - started < 2.0  # not the 5 s window


def test_a_write_waits_at_most_the_window(writers: Any) -> None:
    writer = writers(0.2)
    started = time.monotonic()
    assert writer.submit(_create, "soon").result(timeout=5)
    assert 0.15 <= time.monotonic() - started < 2.0
