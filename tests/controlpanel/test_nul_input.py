"""A NUL character in a path, a query or a form field: a 400 naming where it is, not the 500 of
a PostgreSQL query that cannot hold it (list filters and path parameters read raw values)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from playground.models import ApiToken

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("method", "url", "field"),
    [
        ("get", "/audit/?actor=%00", "actor"),
        ("get", "/audit/?action=a%00", "action"),
        ("get", "/deployments/?host=%00", "host"),
        ("get", "/deployments/?owner=x%00", "owner"),
        ("get", "/deployments/?status=%00", "status"),
        ("get", "/deployments/?%00=1", "'\\x00'"),
        ("post", "/hosts/x%00/retire/", "The address"),
        ("get", "/models/local/0/x%00/", "The address"),
        ("get", "/models/plan/?ref=Qwen/Qwen2.5-7B-Instruct&concurrency=%00", "concurrency"),
    ],
)
def test_a_nul_is_a_400_naming_the_field(
    client: Client, admin_user: Any, method: str, url: str, field: str
) -> None:
    client.force_login(admin_user)
    response = getattr(client, method)(url, headers={"Accept": "text/html,*/*;q=0.8"})
    assert response.status_code == 400
    assert response.content.decode() == f"{field}: null characters are not allowed.\n"
    response = getattr(client, method)(url)  # fetch(): JSON
    assert response.status_code == 400
    assert response.json() == {"ok": False, "error": f"{field}: null characters are not allowed."}


def test_a_nul_in_a_form_field_is_named(client: Client, admin_user: Any) -> None:
    client.force_login(admin_user)
    form = "application/x-www-form-urlencoded"
    response = client.post("/models/token/", "token=hf_%00", content_type=form)
    assert response.status_code == 400 and response.json()["error"].startswith("token: null")
    # multipart is left to the view (parsing it would consume the body): it refuses it too
    response = client.post("/models/token/", {"token": "hf_\x00"}, follow=True)
    assert "does not look like a Hub token" in response.content.decode()


def test_a_token_name_keeps_its_printable_characters(client: Client, operator: Any) -> None:
    client.force_login(operator)
    body = json.dumps({"name": "ci\x00 bot\n"})
    response = client.post("/playground/tokens/", body, content_type="application/json")
    assert response.status_code == 201
    assert ApiToken.objects.get().name == "ci bot"
