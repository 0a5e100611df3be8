"""Issue 39's flows on whole launches of the real vLLM (its CPU build, in place of simulated
GPUs), through a real host worker, the real gateway and a real browser: a LoRA deployment of two
replicas; the deployment page loads an adapter onto both; /v1/ answers with it; the page unloads
it (then 404); a relaunch keeps the adapters, each new replica loading them before it runs.

One test, so the engines start as few times as the flows allow (two at launch, two at the
relaunch): each start is 45 s on two quiet cores and minutes on loaded ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from controlpanel.models import AuditEvent
from deployments.models import AdapterReplica, AdapterStatus, Deployment, DeploymentAdapter
from playground import services
from playground.models import Scope
from tests.support.browser import login
from tests.support.live_server import LiveServer
from tests.support.lora import DEMO_BASE, wait_state
from tests.support.waiting import BROWSER_WAIT_MS, wait_for
from tests.support.workers import start_sim_worker

pytestmark = [pytest.mark.browser, pytest.mark.worker, pytest.mark.engine]
HOST = "lorabrowser"
START_S = 900.0  # two vLLM starts side by side on two shared cores
CHAT = {"messages": [{"role": "user", "content": "1 + 1 ="}], "max_tokens": 8, "temperature": 0}


def statuses(first_pk: int) -> list[str]:
    first = Deployment.objects.get(pk=first_pk)
    return [r.status for r in first.group()]


def placements(adapter_name: str, first_pk: int) -> list[str]:
    rows = AdapterReplica.objects.filter(
        adapter__name=adapter_name,
        adapter__deployment_id=first_pk,
        adapter__status__in=[AdapterStatus.LOADING, AdapterStatus.LOADED],
    ).order_by("replica__replica_index")
    return [p.status for p in rows]


def adapter_badge(page: Any, name: str) -> str:
    page.reload()
    badge = page.locator(f"[data-adapter-status='{name}']")
    return str(badge.inner_text()) if badge.count() else ""


@pytest.mark.timeout(3000)  # four real vLLM starts, two at a time, on the CI's two cores
def test_two_replicas_load_unload_from_the_page_and_a_relaunch_keeps_them(
    root: Path, host_worker: Any, asgi_server: LiveServer, page: Any, operator: Any
) -> None:
    worker = start_sim_worker(host_worker, HOST, root)
    _, raw = services.token_create(user=operator, name="ops", scopes=list(Scope.values))
    headers = {"Authorization": f"Bearer {raw}"}
    body = {
        "name": "tuned",
        "model_ref": f"local:0/{DEMO_BASE}",
        "host": HOST,
        "engine": "vllm",
        "replicas": 2,
        "enable_lora": True,
        "max_loras": 2,
        "max_lora_rank": 8,
    }
    launched = httpx.post(f"{asgi_server.url}/api/v1/deployments", json=body, headers=headers)
    assert launched.status_code == 201, launched.text
    first = launched.json()["id"]
    assert "--enable-lora" in launched.json()["command"]
    try:
        wait_state(lambda: statuses(first), ["running", "running"], timeout_s=START_S)
    except AssertionError:
        print(worker.log()[-5000:])
        raise

    login(page, asgi_server, operator.username)
    page.goto(f"{asgi_server.url}/deployments/{first}/")
    page.fill("#adapter-name", "good")
    page.fill("#adapter-source", "local:0/adapters/good")
    # The form posts and redirects back: its navigation ends before the badge is polled by
    # reloads (a reload during it fails with "Not attached to an active page").
    with page.expect_navigation():
        page.click("#adapter-load")
    wait_for(lambda: adapter_badge(page, "good") == "Loaded")
    wait_state(lambda: placements("good", first), ["loaded", "loaded"])
    for replica in Deployment.objects.get(pk=first).group():
        engine = httpx.get(f"http://127.0.0.1:{replica.port}/v1/models",
                           headers={"Authorization": f"Bearer {replica.engine_api_key()}"})  # fmt: skip
        assert any(m["id"] == "good" and m["parent"] == "tuned" for m in engine.json()["data"])

    url = f"{asgi_server.url}/v1/chat/completions"
    for i in range(6):  # prompts of their own: the balancer spreads them over both replicas
        prompt = [{"role": "user", "content": f"{i} + {i} ="}]
        answer = httpx.post(url, json={**CHAT, "messages": prompt, "model": "good"},
                            headers=headers, timeout=60)  # fmt: skip
        assert answer.status_code == 200, answer.text
    rows = AuditEvent.objects.filter(action="playground.request", detail__adapter="good")
    wait_for(lambda: rows.count() == 6)  # written after each answer, off its path

    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.click("[data-unload='good']")
    wait_for(lambda: adapter_badge(page, "good") == "Unloaded")
    gone = httpx.post(url, json={**CHAT, "model": "good"}, headers=headers, timeout=60)
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "model_not_found"

    api = f"{asgi_server.url}/api/v1/deployments/{first}"
    again = httpx.post(f"{api}/adapters", json={"name": "good", "source": "local:0/adapters/good"},
                       headers=headers)  # fmt: skip
    assert again.status_code == 202, again.text
    wait_state(lambda: placements("good", first), ["loaded", "loaded"])
    assert httpx.post(f"{api}/stop", headers=headers).status_code == 202
    wait_state(lambda: statuses(first), ["stopped", "stopped"], timeout_s=180)

    page.goto(f"{asgi_server.url}/deployments/{first}/")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#relaunch-button")
    page.wait_for_url(lambda u: f"/deployments/{first}/" not in u, timeout=BROWSER_WAIT_MS)
    new = Deployment.objects.filter(name="tuned", replica_of=None).order_by("-pk").first()
    assert new is not None and new.pk != first
    moved = DeploymentAdapter.objects.get(deployment=new, name="good")
    assert moved.status in (AdapterStatus.LOADING, AdapterStatus.LOADED)
    wait_state(lambda: statuses(new.pk), ["running", "running"], timeout_s=START_S)
    # each replica loaded it before it ran: no running replica is without it
    assert placements("good", new.pk) == ["loaded", "loaded"]
    answer = httpx.post(url, json={**CHAT, "model": "good"}, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    assert httpx.post(f"{asgi_server.url}/api/v1/deployments/{new.pk}/stop",
                      headers=headers).status_code == 202  # fmt: skip
    wait_state(lambda: statuses(new.pk), ["stopped", "stopped"], timeout_s=180)
