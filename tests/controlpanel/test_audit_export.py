"""The audit page's chain badge and readable detail, the streamed exports, the syslog copy."""

from __future__ import annotations

import csv
import io
import json
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.test import Client

from controlpanel.audit import audit_record
from controlpanel.auditchain.canonical import canonical_ip, row_hash
from controlpanel.models import AuditCheckpoint

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _rows_on_three_days(admin: Any) -> None:
    for day in range(3):
        with time_machine.travel(T0 + timedelta(days=day), tick=False):
            audit_record(actor=admin, action=f"test.day{day}", detail={"day": day, "x": 1.5})


def _body(response: Any) -> str:
    assert response.streaming and response.is_async  # served without holding a worker thread

    async def read() -> bytes:
        # read as the ASGI server does (iterating it in sync makes Django warn and buffer)
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read)().decode()


def test_exports_a_time_range_as_csv_and_json_lines(client: Client, admin_user: Any) -> None:
    _rows_on_three_days(admin_user)
    client.force_login(admin_user)
    lines = _body(client.get("/audit/export.jsonl?from=2026-12-02&to=2026-12-02")).splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["action"] for r in records] == ["test.day1"]
    rows = list(
        csv.DictReader(
            io.StringIO(_body(client.get("/audit/export.csv?from=2026-12-02&to=2026-12-03")))
        )
    )
    assert [r["action"] for r in rows] == ["test.day1", "test.day2"]
    assert json.loads(rows[0]["detail"]) == {"day": 1, "x": 1.5}
    response = client.get("/audit/export.csv")
    assert 'filename="shardboard-audit-all-all.csv"' in response["Content-Disposition"]


def test_a_csv_cell_is_never_a_formula(client: Client, admin_user: Any) -> None:
    """A name a user chose reaches a spreadsheet as text; the JSON Lines copy stays exact."""
    formula = '=HYPERLINK("http://evil.example","x")'
    audit_record(actor=admin_user, action="test.csv", target_type="deployment", target_id=formula)
    client.force_login(admin_user)
    rows = list(csv.DictReader(io.StringIO(_body(client.get("/audit/export.csv")))))
    (row,) = [r for r in rows if r["action"] == "test.csv"]
    assert row["target_id"] == "'" + formula
    assert row["detail"] == "{}" and row["row_hash"][0] not in "=+-@"
    records = [json.loads(line) for line in _body(client.get("/audit/export.jsonl")).splitlines()]
    assert [r["target_id"] for r in records if r["action"] == "test.csv"] == [formula]


def test_an_exported_row_can_be_rechecked_outside(client: Client, admin_user: Any) -> None:
    audit_record(actor=admin_user, action="test.out", detail={"a": [1, 2]}, ip="::1")
    client.force_login(admin_user)
    records = [json.loads(line) for line in _body(client.get("/audit/export.jsonl")).splitlines()]
    (r,) = [record for record in records if record["action"] == "test.out"]
    again = row_hash(
        seq=r["seq"],
        prev_hash=r["prev_hash"],
        created_at=datetime.fromisoformat(r["created_at"]),
        actor_id=r["actor_id"],
        actor_name=r["actor_name"],
        action=r["action"],
        target_type=r["target_type"],
        target_id=r["target_id"],
        detail=r["detail"],
        client_ip=r["client_ip"],
    )
    assert again == r["row_hash"] and canonical_ip("::1") == r["client_ip"]


@pytest.mark.parametrize(
    ("query", "message"),
    [("from=yesterday", "'from' is not a date"), ("from=2026-12-03&to=2026-12-01", "before")],
)
def test_a_bad_range_is_a_clear_400(
    client: Client, admin_user: Any, query: str, message: str
) -> None:
    client.force_login(admin_user)
    response = client.get(f"/audit/export.csv?{query}")
    assert response.status_code == 400 and message in response.content.decode()


def test_exports_are_for_admins_only(client: Client, operator: Any) -> None:
    client.force_login(operator)
    assert client.get("/audit/export.csv").status_code == 403
    assert client.get("/audit/export.jsonl").status_code == 403


def test_an_unknown_format_is_404(client: Client, admin_user: Any) -> None:
    client.force_login(admin_user)
    assert client.get("/audit/export.xml").status_code == 404


def test_the_page_shows_the_chain_verified_and_readable_detail(
    client: Client, admin_user: Any
) -> None:
    argv = ["vllm", "serve", "/models/tiny", "--api-key", "sk-live-1", "--served-model-name", "a b"]
    audit_record(actor=admin_user, action="deployment.spawn", detail={"argv": argv, "stream": True})
    client.force_login(admin_user)
    page = client.get("/audit/").content.decode()
    assert 'id="chain-badge">chain verified' in page and "through row 2" in page  # + login row
    assert "<code>--served-model-name</code> <code>a b</code>" in page
    assert "<code>--api-key</code> <code>***</code>" in page and "sk-live-1" not in page
    assert "&quot;stream&quot;: true" in page and "{&#x27;stream&#x27;" not in page


def test_the_page_reverifies_only_new_rows(client: Client, admin_user: Any) -> None:
    client.force_login(admin_user)
    for n in range(3):
        audit_record(actor=admin_user, action="test.before", detail={"n": n})
    with time_machine.travel(T0, tick=False):
        client.get("/audit/")
    assert AuditCheckpoint.objects.get().rows_checked == 4  # the login row and three
    audit_record(actor=admin_user, action="test.after")
    with time_machine.travel(T0 + timedelta(seconds=30), tick=False):
        client.get("/audit/")
    checkpoint = AuditCheckpoint.objects.get()
    assert checkpoint.rows_checked == 1 and checkpoint.good_seq == 5


def test_the_page_shows_a_broken_chain(client: Client, admin_user: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":  # before any row: DDL waits for none pending
            cursor.execute(
                "ALTER TABLE controlpanel_auditevent DISABLE TRIGGER controlpanel_auditevent_append_only"
            )
    rows = [audit_record(actor=admin_user, action="test.row", detail={"n": n}) for n in range(3)]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE controlpanel_auditevent SET actor_name = 'someone' WHERE id = %s", [rows[1].pk]
        )
    client.force_login(admin_user)
    page = client.get("/audit/").content.decode()
    assert 'id="chain-badge">chain broken' in page and f"Row {rows[1].pk}" in page


@pytest.mark.django_db(transaction=True)
def test_each_new_row_goes_to_syslog_after_commit(settings: Any, admin_user: Any) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as receiver:
        receiver.bind(("127.0.0.1", 0))
        receiver.settimeout(5)
        settings.AUDIT_SYSLOG_ADDRESS = f"127.0.0.1:{receiver.getsockname()[1]}"
        with transaction.atomic():
            row = audit_record(actor=admin_user, action="test.syslog", detail={"k": "v"})
            receiver.settimeout(0.3)
            with pytest.raises(TimeoutError):
                receiver.recv(65536)  # nothing before commit
        receiver.settimeout(5)
        message = receiver.recv(65536).decode()
    assert message.startswith("<38>shardboard-audit: ")  # facility auth (4), info (6)
    record = json.loads(message.split(": ", 1)[1].rstrip("\x00"))
    assert record["action"] == "test.syslog" and record["row_hash"] == row.row_hash


def test_only_a_full_verification_clears_a_break(client: Client, admin_user: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "ALTER TABLE controlpanel_auditevent DISABLE TRIGGER controlpanel_auditevent_append_only"
            )
    rows = [audit_record(actor=admin_user, action="test.row", detail={"n": n}) for n in range(3)]
    client.force_login(admin_user)
    with time_machine.travel(T0, tick=False):
        client.get("/audit/")  # good through the login row
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE controlpanel_auditevent SET action = 'x' WHERE id = %s", [rows[0].pk]
        )
    with pytest.raises(CommandError):
        call_command("audit_verify")
    later = datetime.now(UTC) + timedelta(hours=1)  # past RECHECK_S after audit_verify
    with time_machine.travel(later, tick=False):
        page = client.get("/audit/").content.decode()  # re-checks only rows after the good one
    assert AuditCheckpoint.objects.get().checked_at == later
    assert "chain broken" in page and f"Row {rows[0].pk}" in page
