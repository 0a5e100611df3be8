"""The audit hash chain: appends link up, audit_verify names the first break, PostgreSQL's
trigger refuses raw UPDATE and DELETE."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction
from django.db.migrations.loader import MigrationLoader

from controlpanel.audit import audit_event, audit_record
from controlpanel.auditchain.canonical import GENESIS, hash_of
from controlpanel.audittrail.verify import verify_chain
from controlpanel.models import AuditEvent

pytestmark = pytest.mark.django_db
postgres_only = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the trigger and advisory lock are PostgreSQL's"
)


def _rows(admin: Any, n: int) -> list[AuditEvent]:
    return [audit_record(actor=admin, action=f"test.row{i}", detail={"i": i}) for i in range(n)]


def _verify_fails() -> str:
    with pytest.raises(CommandError) as failed:
        call_command("audit_verify")
    return str(failed.value)


@pytest.fixture
def no_trigger() -> Iterator[None]:
    """The trigger off for this test's transaction (DDL rolls back with it)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "ALTER TABLE controlpanel_auditevent DISABLE TRIGGER controlpanel_auditevent_append_only"
            )
    yield


def _raw(sql: str, params: list[Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def test_rows_link_up_in_order_and_verify(admin_user: Any) -> None:
    rows = _rows(admin_user, 3)
    grouped = AuditEvent.objects.bulk_create(
        [audit_event(actor=admin_user, action="test.group", detail={"n": n}) for n in range(2)]
    )
    chain = list(AuditEvent.objects.order_by("seq"))
    assert [r.seq for r in chain] == list(range(1, 6))
    assert chain[0].prev_hash == GENESIS
    assert all(b.prev_hash == a.row_hash for a, b in itertools.pairwise(chain))
    assert [r.pk for r in chain] == [r.pk for r in [*rows, *grouped]]
    result = verify_chain()
    assert result.ok and result.rows_checked == 5 and result.head_hash == chain[-1].row_hash


def test_values_the_database_rewrites_still_verify(admin_user: Any) -> None:
    # jsonb prints 1e20 as an integer and reorders keys; inet compresses IPv6.
    detail = {"z": 1e20, "a": [1.0, 0.1, -0.0, 1.5e-7], "ü": "naïve ✓", "n": None, "t": True}
    audit_record(actor=admin_user, action="test.values", detail=detail, ip="2001:0db8::0001")
    audit_record(actor=None, action="test.anon", detail={"username": "x"}, ip="10.0.0.1")
    out = call_command_output()
    assert "audit chain verifies: 2 rows" in out


def call_command_output() -> str:
    from io import StringIO

    buffer = StringIO()
    call_command("audit_verify", stdout=buffer)
    return buffer.getvalue()


@postgres_only
def test_the_trigger_refuses_raw_update_and_delete(admin_user: Any) -> None:
    row = _rows(admin_user, 1)[0]
    for sql in (
        "UPDATE controlpanel_auditevent SET action = 'forged' WHERE id = %s",
        "DELETE FROM controlpanel_auditevent WHERE id = %s",
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            _raw(sql, [row.pk])
    assert AuditEvent.objects.get(pk=row.pk).action == "test.row0"


def test_a_row_changed_with_raw_sql_is_named(admin_user: Any, no_trigger: None) -> None:
    rows = _rows(admin_user, 5)
    _raw("UPDATE controlpanel_auditevent SET detail = %s WHERE id = %s", ['{"i": 99}', rows[2].pk])
    message = _verify_fails()
    assert f"Row {rows[2].pk} (position 3, test.row2) was changed" in message


def test_a_changed_row_given_a_new_hash_breaks_the_next_link(
    admin_user: Any, no_trigger: None
) -> None:
    rows = _rows(admin_user, 4)
    _raw("UPDATE controlpanel_auditevent SET row_hash = %s WHERE id = %s", ["f" * 64, rows[1].pk])
    assert f"Row {rows[1].pk} (position 2, test.row1) was changed" in _verify_fails()


def test_a_chain_rewritten_without_the_key_is_named(admin_user: Any, no_trigger: None) -> None:
    """The attack a hash chain alone misses: a row changed and every hash from it on
    recomputed. The MACs cannot be, without the key."""
    rows = _rows(admin_user, 5)
    prev = rows[1].row_hash
    for row in AuditEvent.objects.filter(seq__gte=3).order_by("seq"):
        if row.seq == 3:
            row.detail = {"i": 99}
        row.prev_hash = prev
        prev = row.row_hash = hash_of(row)
        _raw(
            "UPDATE controlpanel_auditevent SET detail = %s, prev_hash = %s, row_hash = %s"
            " WHERE id = %s",
            [json.dumps(row.detail), row.prev_hash, row.row_hash, row.pk],
        )
    message = _verify_fails()
    assert "(forged)" in message and f"Row {rows[2].pk} (position 3, test.row2)" in message


def test_a_removed_mac_is_named(admin_user: Any, no_trigger: None) -> None:
    rows = _rows(admin_user, 4)
    _raw("UPDATE controlpanel_auditevent SET row_mac = '' WHERE id = %s", [rows[2].pk])
    message = _verify_fails()
    assert "(unkeyed)" in message and f"Row {rows[2].pk} (position 3) has no MAC" in message


def test_rows_keyed_before_a_key_rotation_still_verify(admin_user: Any, settings: Any) -> None:
    _rows(admin_user, 2)
    old = settings.SECRET_KEY
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "a new key " + "x" * 50, [old]
    _rows(admin_user, 1)
    assert verify_chain().ok
    settings.SECRET_KEY_FALLBACKS = []  # the old key forgotten: its rows no longer prove
    result = verify_chain()
    assert result.broken is not None and result.broken.kind == "forged"


def test_a_deleted_row_is_named_by_the_row_after_it(admin_user: Any, no_trigger: None) -> None:
    rows = _rows(admin_user, 5)
    _raw("DELETE FROM controlpanel_auditevent WHERE id = %s", [rows[1].pk])
    message = _verify_fails()
    assert (
        f"Row {rows[2].pk} is at position 3" in message and "positions 2–2 were deleted" in message
    )


def test_a_row_inserted_out_of_order_is_named(admin_user: Any) -> None:
    rows = _rows(admin_user, 3)
    forged = AuditEvent(action="test.forged", detail={}, seq=4, prev_hash=GENESIS)
    forged.created_at = rows[-1].created_at
    forged.row_hash = hash_of(forged)  # a valid hash of its own, linked to the wrong row
    _raw(
        "INSERT INTO controlpanel_auditevent (actor_name, action, target_type, target_id, detail, created_at, seq, prev_hash, row_hash)"
        " VALUES ('', 'test.forged', '', '', '{}', %s, 4, %s, %s)",
        [forged.created_at, GENESIS, forged.row_hash],
    )
    forged_id = AuditEvent.objects.get(seq=4).pk
    assert f"Row {forged_id} (position 4) does not follow row {rows[-1].pk}" in _verify_fails()


def test_a_row_inserted_around_the_chain_is_named(admin_user: Any) -> None:
    _rows(admin_user, 2)
    _raw(
        "INSERT INTO controlpanel_auditevent (actor_name, action, target_type, target_id, detail, created_at, prev_hash, row_hash)"
        " VALUES ('', 'test.sneaked', '', '', '{}', CURRENT_TIMESTAMP, '', '')",
        [],
    )
    sneaked = AuditEvent.objects.get(action="test.sneaked").pk
    assert f"Row {sneaked} has no place in the chain" in _verify_fails()


def test_a_deleted_tail_is_noticed_against_the_last_verification(
    admin_user: Any, no_trigger: None
) -> None:
    rows = _rows(admin_user, 4)
    call_command_output()
    _raw("DELETE FROM controlpanel_auditevent WHERE id = %s", [rows[-1].pk])
    assert "ends at position 3, but it was verified up to position 4" in _verify_fails()


def test_rows_written_before_the_chain_are_chained_by_the_migration(
    admin_user: Any, no_trigger: None
) -> None:
    for i in range(3):
        _raw(
            "INSERT INTO controlpanel_auditevent (actor_name, action, target_type, target_id, detail, client_ip, created_at, prev_hash, row_hash)"
            " VALUES ('old', %s, '', '', %s, '::ffff:10.0.0.1', CURRENT_TIMESTAMP, '', '')",
            [f"test.old{i}", '{"x": 1.0, "y": [1e20]}'],
        )
    migration = __import__(
        "controlpanel.migrations.0004_audit_chain_existing_rows_and_trigger", fromlist=["x"]
    )
    state = MigrationLoader(connection).project_state(("controlpanel", "0003_audit_hash_chain"))
    migration.chain_existing_rows(state.apps, _Editor())
    audit_record(actor=admin_user, action="test.new")
    assert list(AuditEvent.objects.order_by("seq").values_list("seq", flat=True)) == [1, 2, 3, 4]
    result = verify_chain()
    assert result.ok and (result.keyed_from, result.hash_only) == (4, 3)  # keyed from the new row
    assert "The 3 rows before position 4 carry no MAC" in call_command_output()


class _Editor:
    connection = connection


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_never_fork_the_chain(admin_user: Any) -> None:
    """Threads, each on its own connection, write rows in transactions that stay open a
    moment after the audit write, the way services do."""
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(n: int) -> None:
        from django.db import connections

        try:
            start.wait()
            for i in range(6):
                with transaction.atomic():
                    audit_record(actor=None, action="test.concurrent", detail={"w": n, "i": i})
                    if i % 2:
                        AuditEvent.objects.bulk_create(
                            [audit_event(actor=None, action="test.group", detail={"w": n})] * 1
                        )
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(AuditEvent.objects.values_list("seq", flat=True)) == list(range(1, 73))
    result = verify_chain()
    assert result.ok and result.rows_checked == 72
