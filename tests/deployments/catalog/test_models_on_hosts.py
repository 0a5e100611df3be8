"""The Models on hosts page: what each host holds, pre-fetch input refused with a message,
delete refused while a deployment uses the model, every action audited."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlpanel.models import AuditEvent
from deployments.models import CachedModel, Deployment, HostDisk, ModelDownload
from tests.support.hosts import sim_host

pytestmark = pytest.mark.django_db(transaction=True)
REPO = "sbtest/tiny-llama"


@pytest.fixture
def cached(operator: Any) -> CachedModel:
    host = sim_host("cachehost", 1)
    HostDisk.objects.create(
        host=host, cache_dir="/hf/hub", free_bytes=50 << 30, total_bytes=100 << 30
    )
    return CachedModel.objects.create(
        host=host,
        repo_id=REPO,
        commit="a" * 40,
        refs=["main"],
        size_bytes=3 << 20,
        files=6,
        complete=True,
    )


def test_page_shows_models_disk_and_users(
    client: Client, viewer: Any, cached: CachedModel, operator: Any
) -> None:
    Deployment.objects.create(
        name="user-of-it",
        model_id=REPO,
        engine="transformers",
        host=cached.host,
        status="running",
        created_by=operator,
    )
    client.force_login(viewer)
    page = client.get("/models/on-hosts/").content.decode()
    assert "50.0\xa0GB free of 100.0\xa0GB" in page
    assert REPO in page and "user-of-it" in page
    assert "prefetch-form" not in page  # a viewer may look, not fetch
    assert "Delete" not in page


def test_delete_refused_while_in_use_then_audited(
    client: Client, operator: Any, cached: CachedModel
) -> None:
    d = Deployment.objects.create(
        name="busy",
        model_id=REPO,
        engine="transformers",
        host=cached.host,
        status="running",
        created_by=operator,
    )
    client.force_login(operator)
    page = client.post(f"/models/on-hosts/{cached.pk}/delete/", follow=True).content.decode()
    assert "in use on cachehost by busy: stop it first" in page
    assert not AuditEvent.objects.filter(action="model.cache_delete").exists()
    Deployment.objects.filter(pk=d.pk).update(status="stopped")
    page = client.post(f"/models/on-hosts/{cached.pk}/delete/", follow=True).content.decode()
    assert f"Deleting {REPO} from cachehost" in page
    event = AuditEvent.objects.get(action="model.cache_delete")
    assert event.detail["repo_id"] == REPO and event.detail["commit"] == "a" * 40


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"repo_id": "not a repo", "hosts": ["cachehost"]}, "give a Hub id such as"),
        ({"repo_id": REPO, "revision": "bad rev;", "hosts": ["cachehost"]}, "Revision: a branch"),
        ({"repo_id": REPO}, "Choose at least one host."),
        ({"repo_id": REPO, "hosts": ["nowhere"]}, "Unknown host(s): nowhere."),
    ],
)
def test_prefetch_input_refused_with_a_message(
    client: Client, operator: Any, cached: CachedModel, form: dict[str, Any], message: str
) -> None:
    client.force_login(operator)
    response = client.post("/models/on-hosts/prefetch/", form, follow=True)
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not ModelDownload.objects.exists()


def test_prefetch_onto_several_hosts_audited_once(
    client: Client, operator: Any, cached: CachedModel
) -> None:
    sim_host("otherhost", 1)
    client.force_login(operator)
    form = {"repo_id": REPO, "revision": "main", "hosts": ["cachehost", "otherhost"]}
    page = client.post("/models/on-hosts/prefetch/", form, follow=True).content.decode()
    assert f"Fetching {REPO} onto cachehost, otherhost" in page
    assert sorted(ModelDownload.objects.values_list("host__name", flat=True)) == [
        "cachehost",
        "otherhost",
    ]
    event = AuditEvent.objects.get(action="model.prefetch")
    assert event.detail["hosts"] == ["cachehost", "otherhost"]
    again = client.post("/models/on-hosts/prefetch/", form, follow=True).content.decode()
    assert "is already being fetched onto cachehost, otherhost" in again


def test_model_detail_says_where_it_is(
    client: Client, viewer: Any, cached: CachedModel, hub: Any
) -> None:
    client.force_login(viewer)
    page = client.get("/models/meta-llama/Llama-3.1-8B-Instruct/").content.decode()
    assert 'data-field="on-hosts"' in page and "on no host yet" in page
