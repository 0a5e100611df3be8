"""The suite's own hygiene: an async test's database connections, opened on asgiref's single
sync thread, are closed with it, so the test database can be dropped at the session's end."""

from __future__ import annotations

import pytest
from asgiref.sync import SyncToAsync
from django.db import connection

from controlpanel.models import AuditEvent
from tests.support.live_server import close_sync_thread_connections
from tests.support.waiting import wait_for


def sessions_on_this_database() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_the_sync_threads_connection_is_closed() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL sessions")
    mine = sessions_on_this_database()
    # What database_sync_to_async does for an async test or consumer in this process.
    SyncToAsync.single_thread_executor.submit(AuditEvent.objects.count).result(timeout=30)
    assert sessions_on_this_database() == mine + 1
    close_sync_thread_connections()
    # The server process ends a moment after its client closed.
    wait_for(lambda: sessions_on_this_database() == mine, interval_s=0.05)
