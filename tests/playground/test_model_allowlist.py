"""Tokens and teams limited to named models (deployments or LoRA adapters): a model outside the
list is a 403 before any engine is asked, and /v1/models shows only the allowed ones."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from playground import model_allowlist, services, token_limits
from teams.models import Team

CHAT = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def test_lists_are_parsed_into_checked_names() -> None:
    assert model_allowlist.parse("b, a  a") == "a b"
    assert model_allowlist.parse("") == ""
    with pytest.raises(model_allowlist.AllowlistError, match="'-x' is refused"):
        model_allowlist.parse("-x")


@pytest.mark.django_db
def test_a_token_narrows_what_its_owners_teams_allow(operator: Any) -> None:
    assert model_allowlist.allowed(operator) is None
    red = Team.objects.create(name="red", allowed_models="tiny good")
    red.members.add(operator)
    assert model_allowlist.allowed(operator) == {"tiny", "good"}
    assert model_allowlist.allowed(operator, "good other") == {"good"}
    Team.objects.create(name="open").members.add(operator)  # a team without a list: any
    assert model_allowlist.allowed(operator, "other") == {"other"}


def test_a_model_outside_the_tokens_list_is_refused_before_the_engine(
    server: Any, stub: Any, make_deployment: Any, operator: Any
) -> None:
    make_deployment("tiny", stub.port)
    make_deployment("other", stub.port)
    token, raw = services.token_create(user=operator, name="narrow")
    token_limits.models_set(user=operator, token_id=token.pk, models="tiny")
    headers = {"Authorization": f"Bearer {raw}"}
    url = f"{server.url}/v1/chat/completions"
    refused = httpx.post(url, json={**CHAT, "model": "other"}, headers=headers)
    assert refused.status_code == 403
    assert refused.json()["error"]["type"] == "model_not_allowed"
    assert "'other' is not among the models" in refused.json()["error"]["message"]
    assert stub.seen == []
    assert httpx.post(url, json={**CHAT, "model": "tiny"}, headers=headers).status_code == 200
    listed = httpx.get(f"{server.url}/v1/models", headers=headers).json()["data"]
    assert [m["id"] for m in listed] == ["tiny"]
