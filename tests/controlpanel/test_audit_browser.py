"""A real browser on the audit page: the chain's badge, the export links, a broken chain."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from controlpanel.audit import audit_record
from tests.support.browser import login

pytestmark = [pytest.mark.browser]
TRIGGER = "controlpanel_auditevent_append_only"


@pytest.fixture
def trigger_off_for_a_moment() -> Iterator[None]:
    yield
    if connection.vendor == "postgresql":  # the test disabled it outside any test transaction
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE controlpanel_auditevent ENABLE TRIGGER {TRIGGER}")


def _download(page: Any, link: str) -> str:
    with page.expect_download() as download:
        page.click(link)
    return Path(download.value.path()).read_text()


def test_the_audit_page_shows_the_chain_and_exports_it(
    page: Any, asgi_server: Any, admin_user: Any, trigger_off_for_a_moment: None
) -> None:
    audit_record(actor=admin_user, action="test.browser", detail={"argv": ["vllm", "serve", "m"]})
    login(page, asgi_server, admin_user.username)
    page.goto(f"{asgi_server.url}/audit/")
    badge = page.locator("#chain-badge")
    assert badge.inner_text() == "chain verified" and "ok" in badge.get_attribute("class")
    assert page.locator(".argv code").all_inner_texts() == ["vllm", "serve", "m"]

    csv_text = _download(page, "#export-csv")
    assert csv_text.splitlines()[0].startswith("id,seq,created_at,")
    assert "test.browser" in csv_text and "auth.login" in csv_text
    records = [json.loads(line) for line in _download(page, "#export-jsonl").splitlines()]
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"ALTER TABLE controlpanel_auditevent DISABLE TRIGGER {TRIGGER}")
        cursor.execute("UPDATE controlpanel_auditevent SET action = 'test.forged' WHERE seq = 1")
    with pytest.raises(CommandError, match="was changed"):
        call_command("audit_verify")
    page.reload()
    assert page.locator("#chain-badge").inner_text() == "chain broken"
    assert "position 1" in page.locator("#chain-status").inner_text()
