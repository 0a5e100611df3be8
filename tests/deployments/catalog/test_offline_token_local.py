"""Offline serving from cache, the per-session Hub token, local models and path traversal."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.test import Client

from controlpanel.models import AuditEvent
from tests.support.catalog import LLAMA, QWEN, TOKEN, login_client
from tests.support.hubstub import HubStub


def test_offline_previously_seen_model_still_shows(
    client: Client, viewer: Any, hub: HubStub, settings: Any
) -> None:
    settings.HF_CACHE_TTL_S = 0  # every entry is stale at once: a reachable Hub is asked again
    from deployments.catalog.hubaccess import _shared_client

    _shared_client.cache_clear()
    login_client(client, viewer)
    first = client.get(f"/models/{QWEN}/").content.decode()
    assert "data-cached" not in first
    hub.stop()
    response = client.get(f"/models/{QWEN}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "The Hub cannot be reached: showing what was cached since" in html
    assert 'data-arch="layers">28<' in html and 'id="plan-panel"' in html
    plan = client.get("/models/plan/", {"ref": QWEN, "max_model_len": "8192"})
    assert plan.status_code == 200 and plan.json()["plan"]["max_model_len"] == 8192
    unseen = client.get("/models/google/gemma-2-9b-it/")
    assert unseen.status_code == 503
    assert "Hub unreachable" in unseen.content.decode()


def test_user_token_kept_in_session_only(
    client: Client, viewer: Any, hub: HubStub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    login_client(client, viewer)
    locked = client.get(f"/models/{LLAMA}/").content.decode()
    assert "data-spec-error" in locked  # gated, and the server has no token
    response = client.post("/models/token/", {"token": TOKEN, "action": "set"}, follow=True)
    assert "Hub token kept in your session" in response.content.decode()
    assert TOKEN not in response.content.decode()
    hub.reset_requests()
    html = client.get(f"/models/{LLAMA}/").content.decode()
    assert 'data-arch="layers">32<' in html and 'id="plan-panel"' in html
    assert hub.requests and all(r.authorized for r in hub.requests)
    assert client.get("/models/plan/", {"ref": LLAMA}).status_code == 200
    assert TOKEN not in html
    assert TOKEN not in caplog.text
    assert not any(TOKEN in str(row.__dict__) for row in AuditEvent.objects.all())
    # The session row is signed, not encrypted: it holds the token sealed, never as written.
    stored = Session.objects.get(session_key=client.session.session_key)
    assert TOKEN not in stored.session_data and TOKEN not in str(stored.get_decoded())
    client.post("/models/token/", {"action": "clear"})
    assert "catalog_hub_token" not in client.session


def test_bad_token_is_a_message(client: Client, viewer: Any, hub: HubStub) -> None:
    login_client(client, viewer)
    client.post("/models/token/", {"token": "hf_not_a_known_token"})
    response = client.get("/models/", {"q": "qwen"})
    assert "The Hub rejected the token" in response.content.decode()
    response = client.post("/models/token/", {"token": "has spaces in it"}, follow=True)
    assert "does not look like a Hub token" in response.content.decode()


def test_local_models_listed_and_planned(
    client: Client, viewer: Any, hub: HubStub, model_roots: dict[str, Path]
) -> None:
    login_client(client, viewer)
    html = client.get("/models/").content.decode()
    local = html.split('id="local-models"')[1]
    assert 'data-model="models/qwen-local"' in local
    assert "SecretOutsideForCausalLM" not in html and "escape" not in local
    page = client.get("/models/local/0/qwen-local/")
    assert page.status_code == 200
    assert 'data-arch="kv-heads">4<' in page.content.decode()
    panel = client.get("/models/plan/", {"ref": "local:0/qwen-local"}).json()
    folder = str((model_roots["root"] / "qwen-local").resolve())
    assert panel["plan"]["commands"]["vllm"].startswith(f"vllm serve {folder} ")
    assert f"-v {folder}:/models/qwen-local:ro" in panel["plan"]["commands"]["docker"]


@pytest.mark.parametrize(
    "path",
    [
        "/models/local/0/../outside/",
        "/models/local/0/%2e%2e/outside/",
        "/models/local/0/..%2Foutside/",
        "/models/local/0/escape/",
        "/models/local/0//etc/",
        "/models/local/7/qwen-local/",
    ],
)
def test_local_traversal_refused(
    client: Client, viewer: Any, hub: HubStub, model_roots: dict[str, Path], path: str
) -> None:
    login_client(client, viewer)
    response = client.get(path)
    html = response.content.decode()
    assert response.status_code == 404
    assert "data-error" in html
    assert any(
        m in html for m in ("contains &#x27;..&#x27;", "outside", "absolute", "no model root")
    )
    assert "SecretOutsideForCausalLM" not in html


def test_local_traversal_refused_by_plan_endpoint(
    client: Client, viewer: Any, hub: HubStub, model_roots: dict[str, Path]
) -> None:
    login_client(client, viewer)
    for ref in ("local:0/../outside", "local:0/escape", "local:0//etc"):
        response = client.get("/models/plan/", {"ref": ref})
        assert response.status_code == 400, ref
        assert "SecretOutsideForCausalLM" not in response.content.decode()
