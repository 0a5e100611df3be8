import pytest
from django.test import Client

from controlpanel.audit import audit_record
from controlpanel.models import AuditEvent, AuditImmutableError
from tests.support.personas import PASSWORD

pytestmark = pytest.mark.django_db


def test_failed_login_writes_one_row(client: Client, viewer) -> None:
    response = client.post("/accounts/login/", {"username": viewer.username, "password": "wrong"})
    assert response.status_code == 200
    rows = list(AuditEvent.objects.filter(action="auth.login_failed"))
    assert len(rows) == 1
    assert rows[0].detail == {"username": viewer.username}
    assert rows[0].actor is None
    assert "wrong" not in str(rows[0].detail)


def test_login_and_logout_are_recorded(client: Client, operator) -> None:
    client.post("/accounts/login/", {"username": operator.username, "password": PASSWORD})
    client.post("/accounts/logout/")
    actions = list(AuditEvent.objects.filter(actor=operator).values_list("action", flat=True))
    assert sorted(actions) == ["auth.login", "auth.logout"]


def test_rows_cannot_be_updated_or_deleted(admin_user) -> None:
    event = audit_record(actor=admin_user, action="test.thing", detail={"a": 1})
    event.action = "changed"
    with pytest.raises(AuditImmutableError):
        event.save()
    with pytest.raises(AuditImmutableError):
        event.delete()
    with pytest.raises(AuditImmutableError):
        AuditEvent.objects.filter(pk=event.pk).update(action="changed")
    with pytest.raises(AuditImmutableError):
        AuditEvent.objects.all().delete()
    assert AuditEvent.objects.get(pk=event.pk).action == "test.thing"


def test_secrets_are_masked_in_detail(admin_user) -> None:
    event = audit_record(
        actor=admin_user, action="x", detail={"api_key": "sk-1", "env": {"HF_TOKEN": "hf"}, "n": 2}
    )
    assert event.detail == {"api_key": "***", "env": {"HF_TOKEN": "***"}, "n": 2}


def test_audit_page_is_admin_only(client: Client, viewer, admin_user) -> None:
    client.force_login(viewer)
    assert client.get("/audit/").status_code == 403
    client.force_login(admin_user)
    page = client.get("/audit/?action=auth.login")
    assert page.status_code == 200
    assert b"Audit trail" in page.content


def test_admin_site_lists_audit_without_edit(client: Client, admin_user) -> None:
    admin_user.is_staff = True
    admin_user.save()
    audit_record(actor=admin_user, action="test.listed")
    client.force_login(admin_user)
    listing = client.get("/admin/controlpanel/auditevent/")
    assert listing.status_code == 200 and b"test.listed" in listing.content
    assert client.get("/admin/controlpanel/auditevent/add/").status_code == 403


def test_a_nul_in_the_detail_is_spelled_out_not_lost(admin_user) -> None:
    # PostgreSQL stores no NUL character: the row would fail, and the audit with it.
    event = audit_record(
        actor=admin_user, action="test.nul", detail={"k\x00": ["v\x00", {"n": "\x00"}]}
    )
    event.refresh_from_db()
    assert event.detail == {"k\\x00": ["v\\x00", {"n": "\\x00"}]}


def test_secrets_in_a_command_line_are_masked_and_figures_kept(admin_user) -> None:
    argv = [
        "vllm", "serve", "m", "--api-key", "sk-1", "--hf-token=hf_2", "--password", "p3",
        "--max-num-batched-tokens", "8192", "--tokenizer", "t", "--token", "-x",
    ]  # fmt: skip
    event = audit_record(actor=admin_user, action="x", detail={"argv": argv})
    assert event.detail["argv"] == [
        "vllm", "serve", "m", "--api-key", "***", "--hf-token=***", "--password", "***",
        "--max-num-batched-tokens", "8192", "--tokenizer", "t", "--token", "-x",
    ]  # fmt: skip
    assert not {"sk-1", "hf_2", "p3"} & set(str(event.detail).split("'"))
